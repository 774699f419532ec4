//! Shell completions and manual pages, generated from the command definition itself so that
//! they never drift from it: `intake completions SHELL` and `intake man [--out-dir DIR]`.
//! The .deb and `packaging/install.sh` install their output (`packaging/assets.sh`).

use std::io::Write;
use std::path::Path;

use clap::CommandFactory;
use clap_complete::Shell;

use super::Cli;

/// intake(1)'s sections after the commands: where things live and what else configures them
/// (roff).
const TOP_PAGE_SECTIONS: &str = r#".SH ENVIRONMENT
.TP
\fBINTAKE_\fIKEY\fR, \fBINTAKE_\fISECTION\fB__\fIKEY\fR
Set any key of the config file, e.g. \fBINTAKE_LISTEN=0.0.0.0:8080\fR or
\fBINTAKE_SMTP__HOST=mail.example.com\fR; they override the file, and flags override them.
.TP
\fBINTAKE_SERVER\fR, \fBINTAKE_TOKEN\fR
The server and the account token of the commands that talk to a running server
(\fBbackup\fR, \fBendpoint\fR; \fBhealth\fR and \fBexport\fR read \fBINTAKE_SERVER\fR).
.TP
\fBINTAKE_API_KEY\fR
The data API key of \fBexport\fR, kept out of the shell's history and \fBps\fR.
.TP
\fBRUST_LOG\fR
The log level: \fBerror\fR, \fBwarn\fR, \fBinfo\fR (the default), \fBdebug\fR.
.SH FILES
.TP
\fI/etc/intake/intake.toml\fR
The config file of a packaged install (\fB--config\fR).
.TP
\fI/var/lib/intake\fR
Its data dir: records, keys, the delivery queue and the search index (\fB--data-dir\fR).
.TP
\fI/usr/share/doc/intake/docs/src/\fR
The manual, one Markdown file per chapter.
.SH EXIT STATUS
0 on success, 1 on any error, which is printed on standard error.
.SH SEE ALSO
\fBsystemctl\fR(1), \fBjournalctl\fR(1)
"#;

/// `intake completions SHELL`: the completion script on stdout.
pub(super) fn completions(shell: Shell) -> Result<(), String> {
    // Into memory first: clap_complete panics when its writer fails (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "intake", &mut script);
    let mut out = std::io::stdout().lock();
    out.write_all(&script)
        .and_then(|()| out.flush())
        .map_err(|e| format!("cannot write the completions: {e}"))
}

/// `intake man`: intake(1) on stdout; with `--out-dir DIR`, intake(1) and one page per command
/// (intake-serve(1), intake-endpoint-create(1), …) written into DIR.
pub(super) fn man(out_dir: Option<&Path>) -> Result<(), String> {
    // Built once, as clap_mangen::generate_to does: the subcommands then carry their display
    // names (`intake-serve`), which become their pages' names. No `help` command: it has no page.
    let mut command = Cli::command().disable_help_subcommand(true);
    command.build();
    let Some(dir) = out_dir else {
        let mut page = Vec::new();
        top_page(&command, &mut page).map_err(|e| format!("cannot render intake(1): {e}"))?;
        let mut out = std::io::stdout().lock();
        return out
            .write_all(&page)
            .and_then(|()| out.flush())
            .map_err(|e| format!("cannot write the manual page: {e}"));
    };
    let written = std::fs::create_dir_all(dir).and_then(|()| {
        let mut top = std::fs::File::create(dir.join("intake.1"))?;
        top_page(&command, &mut top)?;
        command_pages(&command, dir)
    });
    written.map_err(|e| format!("cannot write the manual pages into {}: {e}", dir.display()))
}

/// The title line's source and manual names: the version alone (the commit and build are in
/// the VERSION section).
fn page(command: clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(command)
        .source(format!("intake {}", env!("CARGO_PKG_VERSION")))
        .manual("intake manual")
}

/// intake(1): clap_mangen's sections, then ENVIRONMENT, FILES, EXIT STATUS and SEE ALSO.
fn top_page(command: &clap::Command, out: &mut dyn Write) -> std::io::Result<()> {
    let man = page(command.clone());
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;
    man.render_subcommands_section(out)?;
    out.write_all(TOP_PAGE_SECTIONS.as_bytes())?;
    man.render_version_section(out)
}

/// One page per command below COMMAND, recursively (`intake-endpoint-create.1`).
fn command_pages(command: &clap::Command, dir: &Path) -> std::io::Result<()> {
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        page(sub.clone()).generate_to(dir)?;
        command_pages(sub, dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The command definition is valid for clap (conflicting names or flags panic only when
    /// the definition is built, which this does).
    #[test]
    fn the_command_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_command_gets_a_manual_page() {
        let dir = tempfile::tempdir().unwrap();
        man(Some(dir.path())).unwrap();
        let mut pages: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        pages.sort();
        for page in [
            "intake.1",
            "intake-serve.1",
            "intake-endpoint-create.1",
            "intake-completions.1",
            "intake-health.1",
            "intake-export.1",
        ] {
            assert!(
                pages.iter().any(|p| p == page),
                "{page} missing from {pages:?}"
            );
        }
        assert!(!pages.iter().any(|p| p == "intake-help.1"), "{pages:?}");
        let top = std::fs::read_to_string(dir.path().join("intake.1")).unwrap();
        assert!(
            top.contains(".SH ENVIRONMENT") && top.contains("INTAKE_SERVER"),
            "{top}"
        );
        assert!(top.contains("intake\\-serve(1)"), "{top}");
    }
}
