//! `hako check PACKAGE`: the static checks, no execution. Prints the verdict, or with
//! `--json` one object `{"valid": bool, "problems": [{"rule", "message"}…]}`.

use std::path::PathBuf;

use clap::Args;

use super::Failure;
use crate::package::LoadError;

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// A package folder, a .tar.gz/.tgz archive of one, or oci://REGISTRY/REPOSITORY:TAG.
    package: PathBuf,
    /// Print the verdict as JSON on stdout.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    registry: super::registry::RegistryArgs,
}

pub fn run(args: CheckArgs) -> Result<(), Failure> {
    if !args.json {
        let package = super::load_package(&args.package, None, &args.registry)?;
        outln!(
            "{} {}: valid ABI 1 package{}",
            package.manifest.name,
            package.manifest.version,
            if package.uses_simd {
                " (uses SIMD)"
            } else {
                ""
            }
        );
        return Ok(());
    }
    match super::load_quietly(&args.package, None, &args.registry)? {
        Ok(package) => {
            let verdict = serde_json::json!({
                "valid": true,
                "name": package.manifest.name,
                "version": package.manifest.version,
                "uses_simd": package.uses_simd,
                "problems": [],
            });
            outln!("{verdict}");
            Ok(())
        }
        Err(LoadError::Refused(refusal)) => {
            let verdict = serde_json::json!({ "valid": false, "problems": refusal.problems });
            outln!("{verdict}");
            Err(Failure::Refused)
        }
        Err(err) => Err(Failure::Host(anyhow::Error::new(err))),
    }
}
