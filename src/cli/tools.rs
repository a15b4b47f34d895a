//! `hako tools PACKAGE|NAME`: the tools a package offers, as JSON. A stored package answers
//! what its discovery recorded; a package on disk is discovered now (nothing is stored).

use clap::Args;

use super::{Failure, Target};
use crate::call;
use crate::engines::EngineConfig;
use crate::store::{ModuleBytes, ModuleSpec};

#[derive(Debug, Args)]
pub struct ToolsArgs {
    /// A package folder or archive, an oci:// reference, or the name of a stored package.
    package: String,
    #[command(flatten)]
    registry: super::registry::RegistryArgs,
    #[command(flatten)]
    store: super::stores::StoreArgs,
    /// Print an object: the package's name, version and origin (the reference and manifest
    /// digest it was pulled from, or null), and its tools.
    #[arg(long)]
    json: bool,
}

pub fn run(args: ToolsArgs) -> Result<(), Failure> {
    let opened = args.store.open()?;
    let store = &opened.store;
    let (name, version, origin, tools) = match super::target(&args.package) {
        Target::Stored(name) => {
            let stored = opened.stored(&name)?;
            let record = stored.record;
            (record.name, record.version, record.origin, stored.tools)
        }
        Target::Path(path) => {
            let package = super::load_package(&path, Some(store), &args.registry)?;
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
                Ok(discovery) => (
                    package.manifest.name.clone(),
                    package.manifest.version.clone(),
                    package.origin.clone(),
                    discovery.tools,
                ),
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
    let json = if args.json {
        let shown = serde_json::json!({
            "name": name,
            "version": version,
            "origin": origin,
            "tools": tools,
        });
        serde_json::to_string_pretty(&shown)
    } else {
        serde_json::to_string_pretty(&tools)
    }
    .map_err(|err| Failure::Host(err.into()))?;
    outln!("{json}");
    Ok(())
}
