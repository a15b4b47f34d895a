//! `hako tools PACKAGE|NAME`: the tools a package offers, as JSON. A stored package answers
//! what its discovery recorded; a package on disk is discovered now (nothing is stored).

use clap::Args;

use super::{Failure, Target};
use crate::call;
use crate::engines::EngineConfig;
use crate::store::{ModuleBytes, ModuleSpec};

#[derive(Debug, Args)]
pub struct ToolsArgs {
    /// A package folder or archive, or the name of a stored package.
    package: String,
    #[command(flatten)]
    store: super::stores::StoreArgs,
}

pub fn run(args: ToolsArgs) -> Result<(), Failure> {
    let opened = args.store.open()?;
    let store = &opened.store;
    let tools = match super::target(&args.package) {
        Target::Stored(name) => opened.stored(&name)?.tools,
        Target::Path(path) => {
            let package = super::load_package(&path, Some(store))?;
            let loaded = store
                .load_module(
                    &ModuleSpec {
                        wasm: ModuleBytes::Given(&package.wasm),
                        module_sha256: &package.module_sha256,
                        uses_simd: package.uses_simd,
                        config: EngineConfig::DEFAULT,
                    },
                    None,
                )
                .map_err(|err| Failure::Host(err.into()))?;
            match call::discover(
                &loaded.module,
                &package.manifest.name,
                package.assets.clone(),
            ) {
                Ok(discovery) => discovery.tools,
                Err(call::DiscoveryError::Run(err)) => return Err(Failure::Host(err.into())),
                Err(refusal) => {
                    eprintln!(
                        "hako: {} is refused at discovery: {refusal}",
                        path.display()
                    );
                    return Err(Failure::Refused);
                }
            }
        }
    };
    let json = serde_json::to_string_pretty(&tools).map_err(|err| Failure::Host(err.into()))?;
    outln!("{json}");
    Ok(())
}
