//! `hako keygen --out PREFIX`: a key pair for signing version records, `PREFIX` (private,
//! mode 0600) and `PREFIX.pub`, by [`crate::store::signing`]. Give the private key to
//! uploaders (`hako upload --signing-key`) and the public one to nodes (`--trust-key`).

use std::path::PathBuf;

use clap::Args;

use super::Failure;
use crate::store::signing::{self, KeyError};

#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Where to write the private key; the public key goes to the same path with `.pub`.
    #[arg(long, value_name = "PREFIX")]
    out: PathBuf,
}

pub fn run(args: KeygenArgs) -> Result<(), Failure> {
    let public = signing::keygen(&args.out).map_err(|err| match err {
        KeyError::Bad { .. } => Failure::Usage(err.to_string()),
        KeyError::Io { .. } => Failure::Host(err.into()),
    })?;
    outln!(
        "wrote {} (private, mode 0600) and {}: public key {public}",
        args.out.display(),
        signing::public_path(&args.out).display()
    );
    Ok(())
}
