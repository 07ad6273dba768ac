//! `faultline completions SHELL` and `faultline install-extras`: shell completions
//! (clap_complete) and man pages (clap_mangen), generated from the same clap definitions
//! the binary parses with, so they never drift from it.

use crate::exit::Exit;
use anyhow::{Context, Result};
use clap::{Command, CommandFactory};
use clap_complete::Shell;
use std::path::{Path, PathBuf};

#[derive(clap::Parser)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: Shell,
}

#[derive(clap::Parser)]
pub struct InstallExtrasArgs {
    /// Where to install: man pages go to PREFIX/share/man/man1, completions to
    /// PREFIX/share/bash-completion/completions, PREFIX/share/zsh/site-functions and
    /// PREFIX/share/fish/vendor_completions.d (where man, bash-completion, zsh and fish look
    /// under /usr/local and ~/.local).
    #[arg(long, default_value = "/usr/local")]
    prefix: PathBuf,
}

fn command() -> Command {
    crate::Cli::command()
}

pub fn cmd_completions(a: CompletionsArgs) -> Result<Exit> {
    clap_complete::generate(a.shell, &mut command(), "faultline", &mut std::io::stdout());
    Ok(Exit::Clean)
}

/// The man pages: `faultline.1`, and `faultline-SUB.1` (`faultline-lab-run.1`, ...) for every
/// subcommand that `--help` shows, as `git` names its own.
fn man_pages(cmd: &Command, name: &str, out: &mut Vec<(String, Vec<u8>)>) -> Result<()> {
    // The page's title is its full name, and so is the usage line's.
    let cmd = cmd.clone().display_name(name.to_string()).bin_name(name.replace('-', " "));
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .title(name.to_string())
        .source(format!("faultline {}", env!("CARGO_PKG_VERSION")))
        .render(&mut page)
        .with_context(|| format!("cannot render the man page of {name}"))?;
    out.push((format!("{name}.1"), page));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        man_pages(sub, &format!("{name}-{}", sub.get_name()), out)?;
    }
    Ok(())
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    println!("{}", path.display());
    Ok(())
}

pub fn cmd_install_extras(a: InstallExtrasArgs) -> Result<Exit> {
    let mut cmd = command();
    cmd.build();
    let mut pages = Vec::new();
    man_pages(&cmd, "faultline", &mut pages)?;
    let man1 = a.prefix.join("share/man/man1");
    for (file, page) in &pages {
        write(&man1.join(file), page)?;
    }
    let share = a.prefix.join("share");
    for (shell, path) in [
        (Shell::Bash, share.join("bash-completion/completions/faultline")),
        (Shell::Zsh, share.join("zsh/site-functions/_faultline")),
        (Shell::Fish, share.join("fish/vendor_completions.d/faultline.fish")),
    ] {
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut cmd, "faultline", &mut script);
        write(&path, &script)?;
    }
    Ok(Exit::Clean)
}
