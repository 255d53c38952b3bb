//! `kvfabric secret show | stage | promote | retire --file FILE`: the cluster's namespace
//! secret file (`namespace-secret.toml`, see [`kvfabric_core::secret`]) and its rotation.
//!
//! Each step rewrites the file in place (mode 0600) and prints the ids of its secrets (never
//! a secret). After each step, copy the file to every member and restart them one at a time;
//! finish the restarts before the next step. `show` prints the ids only.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, ValueEnum};

use kvfabric_core::secret::{Rotation, Secrets};

/// What to do.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum Step {
    /// Print the ids of the file's secrets.
    Show,
    /// Add a new secret as `next` (read only): restart every node with it before `promote`.
    Stage,
    /// Make `next` current (puts use it) and keep the old one readable as `previous`.
    Promote,
    /// Drop `previous`: blocks put under it become unreadable on nodes restarted with it.
    Retire,
}

/// Arguments of `kvfabric secret`.
#[derive(Debug, Args)]
pub(crate) struct SecretArgs {
    /// The step.
    #[arg(value_enum)]
    step: Step,
    /// The secret file (e.g. CERTS_DIR/namespace-secret.toml).
    #[arg(long)]
    file: PathBuf,
}

/// Runs `kvfabric secret`.
pub(crate) fn run(a: SecretArgs) -> anyhow::Result<()> {
    let mut s = Secrets::load(&a.file)?;
    let step = match a.step {
        Step::Show => None,
        Step::Stage => Some(Rotation::Stage),
        Step::Promote => Some(Rotation::Promote),
        Step::Retire => Some(Rotation::Retire),
    };
    if let Some(step) = step {
        s.rotate(step)?;
        s.write(&a.file)
            .with_context(|| format!("rewriting {}", a.file.display()))?;
    }
    println!("{}", describe(&s));
    if step.is_some() {
        println!(
            "now copy {} to every member and restart them one at a time",
            a.file.display()
        );
    }
    Ok(())
}

/// One line per secret of the file: its role and id.
pub(crate) fn describe(s: &Secrets) -> String {
    let mut out = format!("current  {}", s.current.id());
    if let Some(n) = &s.next {
        out.push_str(&format!("\nnext     {}", n.id()));
    }
    for p in &s.previous {
        out.push_str(&format!("\nprevious {}", p.id()));
    }
    out
}
