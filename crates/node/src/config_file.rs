//! One config file for every flag, and the environment.
//!
//! Every long flag of every command can be set three ways, lowest
//! precedence first:
//! 1. the config file (`--config FILE`, or `TICKDB_CONFIG`): TOML with one
//!    `key = value` per flag, the key being the flag's long name with `-`
//!    or `_`. Keys at the top level apply to every command that has the
//!    flag; a table named for a command (`[rdb]`, `[hdb.serve]`) applies to
//!    that command only and wins over the top level;
//! 2. the environment: `TICKDB_` and the flag's name in capitals with `_`
//!    (`--ilp-port` is `TICKDB_ILP_PORT`);
//! 3. the command line.
//!
//! It works on clap's view of the commands, so a flag added to any role is
//! settable from the file and the environment without more code. A key
//! that is no flag of any command, or a table that names no command, is an
//! error naming the file and the key: a typo never silently runs with a
//! default. `tickdb config print ROLE` shows what a role would run with,
//! where each value came from, and secrets masked.

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Command};
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Prefix of the environment variable of every flag.
pub const ENV_PREFIX: &str = "TICKDB_";
/// The id of the global `--config` flag (its variable is `TICKDB_CONFIG`).
pub const CONFIG_ARG: &str = "config";
/// A config file larger than this is refused: it is a settings file.
pub const CONFIG_FILE_BYTES_MAX: u64 = 1024 * 1024;
/// What a masked secret prints as.
const MASK: &str = "********";
/// Flags whose values are masked by `config print`: names containing one of
/// these words, unless they name a file or directory holding the secret.
const SECRET_WORDS: [&str; 4] = ["password", "token", "secret", "private"];

#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("config file {path}: cannot read it: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("config file {path}: `{key}` {problem}")]
    Key {
        path: PathBuf,
        key: String,
        problem: String,
    },
    /// A value from the file that the flag itself rejects (clap's message
    /// names the flag and the value).
    #[error("config file {path}: {message}")]
    Value { path: PathBuf, message: String },
    /// The command line or the environment is wrong: clap prints it.
    #[error(transparent)]
    Clap(#[from] clap::Error),
}

/// The variable that sets the flag `--long`.
pub fn env_name(long: &str) -> String {
    format!(
        "{ENV_PREFIX}{}",
        long.replace('-', "_").to_ascii_uppercase()
    )
}

/// `cmd` with every long flag of every command readable from its
/// `TICKDB_*` variable (values hidden from `--help`, as some are secrets).
pub fn with_env(cmd: Command) -> Command {
    cmd.mut_args(|a| {
        let a = a.hide_env_values(true);
        match (a.get_long().map(str::to_string), a.get_env().is_some()) {
            (Some(long), false) if takes_setting(&a) => {
                let switch = matches!(a.get_action(), ArgAction::SetTrue);
                let a = a.env(env_name(&long));
                // A switch's variable reads as shells write it: 1/0,
                // yes/no, on/off, true/false.
                if switch {
                    a.value_parser(clap::builder::BoolishValueParser::new())
                } else {
                    a
                }
            }
            _ => a,
        }
    })
    .mut_subcommands(with_env)
}

/// Help, version and the config flag itself are not settings.
fn takes_setting(a: &clap::Arg) -> bool {
    !matches!(
        a.get_action(),
        ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version
    ) && a.get_id().as_str() != CONFIG_ARG
}

/// Parses `argv` as `cmd` (already passed through [`with_env`]), with
/// every flag the command line and the environment leave unset taken from
/// the config file, when there is one.
pub fn resolve(cmd: &Command, argv: Vec<OsString>) -> Result<ArgMatches, ConfigFileError> {
    let first = cmd.clone().try_get_matches_from(argv.clone())?;
    let (path_names, leaf_m) = leaf(&first);
    let Some(file) = config_path(leaf_m) else {
        return Ok(first);
    };
    let table = load(&file)?;
    validate(cmd, &table, &[], &file)?;
    let leaf_cmd = find(cmd, &path_names);
    let mut injected: Vec<OsString> = Vec::new();
    for (key, value) in settings_for(&table, &path_names) {
        let Some(arg) = arg_for(leaf_cmd, &key) else {
            continue; // another command's flag, at the top level
        };
        let id = arg.get_id().as_str();
        if matches!(
            leaf_m.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            continue;
        }
        let long = arg.get_long().unwrap_or(id);
        injected.extend(flag_args(arg, long, &key, &value, &file)?);
    }
    if injected.is_empty() {
        return Ok(first);
    }
    let at = leaf_position(&argv, &path_names);
    let mut argv2 = argv;
    argv2.splice(at..at, injected);
    cmd.clone()
        .try_get_matches_from(argv2)
        .map_err(|e| ConfigFileError::Value {
            path: file,
            message: e
                .to_string()
                .trim_start_matches("error: ")
                .trim()
                .to_string(),
        })
}

/// The names of the subcommands chosen, outermost first, and the innermost
/// command's matches.
pub fn leaf(m: &ArgMatches) -> (Vec<String>, &ArgMatches) {
    let mut names = Vec::new();
    let mut m = m;
    while let Some((name, sub)) = m.subcommand() {
        names.push(name.to_string());
        m = sub;
    }
    (names, m)
}

/// The command reached by following `names` from `cmd`.
pub fn find<'a>(cmd: &'a Command, names: &[String]) -> &'a Command {
    let mut c = cmd;
    for n in names {
        match c.find_subcommand(n) {
            Some(s) => c = s,
            None => break,
        }
    }
    c
}

fn config_path(m: &ArgMatches) -> Option<PathBuf> {
    m.try_get_one::<PathBuf>(CONFIG_ARG).ok().flatten().cloned()
}

fn load(path: &Path) -> Result<toml::Table, ConfigFileError> {
    let read_err = |source| ConfigFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let len = std::fs::metadata(path).map_err(read_err)?.len();
    if len > CONFIG_FILE_BYTES_MAX {
        return Err(ConfigFileError::Invalid {
            path: path.to_path_buf(),
            message: format!(
                "{len} bytes, more than the {CONFIG_FILE_BYTES_MAX} a config file may have"
            ),
        });
    }
    let text = std::fs::read_to_string(path).map_err(read_err)?;
    text.parse::<toml::Table>()
        .map_err(|e| ConfigFileError::Invalid {
            path: path.to_path_buf(),
            message: format!("not valid TOML: {}", e.to_string().trim()),
        })
}

/// Every long flag name of every command in the tree.
fn all_longs(cmd: &Command, out: &mut BTreeSet<String>) {
    for a in cmd.get_arguments() {
        if let Some(l) = a.get_long() {
            if takes_setting(a) {
                out.insert(l.to_string());
            }
        }
    }
    for s in cmd.get_subcommands() {
        all_longs(s, out);
    }
}

fn arg_for<'a>(cmd: &'a Command, key: &str) -> Option<&'a clap::Arg> {
    let long = key.replace('_', "-");
    cmd.get_arguments()
        .find(|a| a.get_long() == Some(long.as_str()) && takes_setting(a))
}

/// Checks every key of `table` (the table for the command at `path`):
/// each must be a flag of that command (at the top level, of any command)
/// or a table naming one of its subcommands.
fn validate(
    root: &Command,
    table: &toml::Table,
    path: &[String],
    file: &Path,
) -> Result<(), ConfigFileError> {
    let cmd = find(root, path);
    let mut longs = BTreeSet::new();
    if path.is_empty() {
        all_longs(root, &mut longs);
    }
    for (key, value) in table {
        let mut p = path.to_vec();
        p.push(key.clone());
        let dotted = p.join(".");
        if let toml::Value::Table(sub) = value {
            if cmd.find_subcommand(key).is_some() {
                validate(root, sub, &p, file)?;
                continue;
            }
            return Err(ConfigFileError::Key {
                path: file.to_path_buf(),
                key: dotted,
                problem: format!(
                    "is a table, but `{}` has no command `{key}`",
                    command_name(path)
                ),
            });
        }
        let known = if path.is_empty() {
            longs.contains(&key.replace('_', "-"))
        } else {
            arg_for(cmd, key).is_some()
        };
        if !known {
            let scope = if path.is_empty() {
                "no command of tickdb".to_string()
            } else {
                format!("`{}`", command_name(path))
            };
            return Err(ConfigFileError::Key {
                path: file.to_path_buf(),
                key: dotted,
                problem: format!("is not a flag of {scope} (see --help)"),
            });
        }
    }
    Ok(())
}

fn command_name(path: &[String]) -> String {
    std::iter::once("tickdb")
        .chain(path.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The settings that apply to the command at `path`: the top level's, then
/// each enclosing command's table, the innermost last (so it wins).
fn settings_for(table: &toml::Table, path: &[String]) -> Vec<(String, toml::Value)> {
    let mut out: Vec<(String, toml::Value)> = Vec::new();
    let mut put = |t: &toml::Table| {
        for (k, v) in t {
            if v.is_table() {
                continue;
            }
            let norm = k.replace('_', "-");
            out.retain(|(k2, _)| k2.replace('_', "-") != norm);
            out.push((k.clone(), v.clone()));
        }
    };
    put(table);
    let mut t = table;
    for name in path {
        match t.get(name).and_then(toml::Value::as_table) {
            Some(sub) => {
                put(sub);
                t = sub;
            }
            None => break,
        }
    }
    out
}

/// The command-line words that set `arg` to `value`.
fn flag_args(
    arg: &clap::Arg,
    long: &str,
    key: &str,
    value: &toml::Value,
    file: &Path,
) -> Result<Vec<OsString>, ConfigFileError> {
    let flag = OsString::from(format!("--{long}"));
    let bad = |problem: String| ConfigFileError::Key {
        path: file.to_path_buf(),
        key: key.to_string(),
        problem,
    };
    let is_switch = matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse);
    let words = |v: &toml::Value| -> Result<String, ConfigFileError> {
        match v {
            toml::Value::String(s) => Ok(s.clone()),
            toml::Value::Integer(i) => Ok(i.to_string()),
            toml::Value::Float(f) => Ok(f.to_string()),
            toml::Value::Boolean(b) => Ok(b.to_string()),
            toml::Value::Datetime(d) => Ok(d.to_string()),
            toml::Value::Array(_) | toml::Value::Table(_) => {
                Err(bad("cannot be a nested array or table".to_string()))
            }
        }
    };
    match value {
        toml::Value::Boolean(b) if is_switch => {
            let on = matches!(arg.get_action(), ArgAction::SetTrue) == *b;
            Ok(if on { vec![flag] } else { vec![] })
        }
        _ if is_switch => Err(bad(format!(
            "is a switch: set it to true or false, not {value}"
        ))),
        toml::Value::Array(items) => {
            if !matches!(arg.get_action(), ArgAction::Append) {
                return Err(bad("takes one value, not an array".to_string()));
            }
            let mut out = Vec::with_capacity(items.len() * 2);
            for item in items {
                out.push(flag.clone());
                out.push(OsString::from(words(item)?));
            }
            Ok(out)
        }
        v => Ok(vec![flag, OsString::from(words(v)?)]),
    }
}

/// Where the innermost subcommand's own flags start in `argv`.
fn leaf_position(argv: &[OsString], path: &[String]) -> usize {
    let mut at = 1;
    for name in path {
        if let Some(p) = argv[at.min(argv.len())..]
            .iter()
            .position(|w| w.to_str() == Some(name.as_str()))
        {
            at += p + 1;
        }
    }
    at.min(argv.len())
}

fn is_secret(id: &str) -> bool {
    let id = id.to_ascii_lowercase();
    SECRET_WORDS.iter().any(|w| id.contains(w)) && !id.ends_with("_file") && !id.ends_with("_dir")
}

/// The effective settings of the command at `path` as TOML, each with
/// where it came from, secrets masked: what `tickdb config print` shows.
pub fn render(root: &Command, path: &[String], m: &ArgMatches, typed: &BTreeSet<String>) -> String {
    let cmd = find(root, path);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# tickdb {}: effective settings (config file < TICKDB_* environment < flag)",
        path.join(" ")
    );
    match config_path(m) {
        Some(p) => {
            let _ = writeln!(out, "# config file: {}", p.display());
        }
        None => {
            let _ = writeln!(out, "# config file: none (--config FILE or TICKDB_CONFIG)");
        }
    }
    let _ = writeln!(out, "[{}]", path.join("."));
    for arg in cmd.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if !takes_setting(arg) {
            continue;
        }
        let id = arg.get_id().as_str();
        let key = long.replace('-', "_");
        let source = match m.value_source(id) {
            // A value from the file reaches clap as a flag it did not type.
            Some(ValueSource::CommandLine) if !typed.contains(long) => "config file".to_string(),
            Some(ValueSource::CommandLine) => "flag".to_string(),
            Some(ValueSource::EnvVariable) => format!("environment {}", env_name(long)),
            Some(ValueSource::DefaultValue) => "default".to_string(),
            Some(_) => "set".to_string(),
            None => "unset".to_string(),
        };
        let raw: Vec<String> = m
            .get_raw(id)
            .map(|vals| vals.map(|v| v.to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        if raw.is_empty() {
            let _ = writeln!(out, "# {key} = (unset)");
            continue;
        }
        let shown = if is_secret(id) {
            toml_str(MASK)
        } else if matches!(arg.get_action(), ArgAction::Append) {
            format!(
                "[{}]",
                raw.iter()
                    .map(|v| toml_value(v))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            toml_value(&raw[raw.len() - 1])
        };
        let _ = writeln!(out, "{key} = {shown}  # {source}");
    }
    out
}

/// The long flags the user typed in `argv`, for `render` to tell them from
/// the ones the config file supplied (clap sees both as command-line flags).
pub fn typed_flags(argv: &[OsString]) -> BTreeSet<String> {
    argv.iter()
        .filter_map(|w| w.to_str()?.strip_prefix("--"))
        .map(|s| s.split('=').next().unwrap_or(s).to_string())
        .collect()
}

fn toml_value(v: &str) -> String {
    if v == "true" || v == "false" || v.parse::<i64>().is_ok() {
        v.to_string()
    } else {
        toml_str(v)
    }
}

fn toml_str(v: &str) -> String {
    toml::Value::String(v.to_string()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, Command};

    fn cli() -> Command {
        with_env(
            Command::new("tickdb")
                .arg(
                    Arg::new(CONFIG_ARG)
                        .long("config")
                        .global(true)
                        .env("TICKDB_CONFIG")
                        .value_parser(clap::value_parser!(PathBuf)),
                )
                .subcommand(
                    Command::new("rdb")
                        .arg(
                            Arg::new("http_port")
                                .long("http-port")
                                .default_value("8700"),
                        )
                        .arg(
                            Arg::new("pg_password")
                                .long("pg-password")
                                .default_value("tickdb"),
                        )
                        .arg(Arg::new("quiet").long("quiet").action(ArgAction::SetTrue))
                        .arg(Arg::new("fsmem").long("fsmem").action(ArgAction::Append)),
                )
                .subcommand(Command::new("tp").arg(Arg::new("ilp_port").long("ilp-port"))),
        )
    }

    fn argv(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(f.path(), text).expect("write config");
        f
    }

    #[test]
    fn the_file_sets_what_flags_leave_unset_and_role_tables_win() {
        let f = file("http_port = 1\nilp-port = \"9\"\nfsmem = [\"trade\", \"quote\"]\nquiet = true\n[rdb]\nhttp-port = 2\n");
        let p = f.path().to_str().expect("utf-8 path");
        let m = resolve(&cli(), argv(&["tickdb", "--config", p, "rdb"])).expect("resolves");
        let (_, rdb) = leaf(&m);
        assert_eq!(
            rdb.get_one::<String>("http_port").map(String::as_str),
            Some("2")
        );
        assert!(rdb.get_flag("quiet"));
        let fs: Vec<&String> = rdb.get_many::<String>("fsmem").expect("fsmem").collect();
        assert_eq!(fs, ["trade", "quote"]);
        let m = resolve(
            &cli(),
            argv(&["tickdb", "rdb", "--config", p, "--http-port", "3"]),
        )
        .expect("resolves");
        let (_, rdb) = leaf(&m);
        assert_eq!(
            rdb.get_one::<String>("http_port").map(String::as_str),
            Some("3")
        );
    }

    #[test]
    fn typos_and_wrong_shapes_name_the_file_and_the_key() {
        for (text, want) in [
            ("htp_port = 1\n", "`htp_port` is not a flag of no command"),
            (
                "[rdb]\nilp_port = 1\n",
                "`rdb.ilp_port` is not a flag of `tickdb rdb`",
            ),
            ("[rbd]\nx = 1\n", "`rbd` is a table"),
            ("[rdb]\nquiet = 1\n", "`quiet` is a switch"),
            ("[rdb]\nhttp_port = [1, 2]\n", "takes one value"),
            ("http_port = \n", "not valid TOML"),
        ] {
            let f = file(text);
            let p = f.path().to_str().expect("utf-8 path");
            let e = resolve(&cli(), argv(&["tickdb", "--config", p, "rdb"]))
                .expect_err(text)
                .to_string();
            assert!(e.contains(want) && e.contains(p), "{text:?}: {e}");
        }
    }

    #[test]
    fn print_masks_secrets_and_names_sources() {
        let f = file("[rdb]\npg_password = \"hunter2\"\n");
        let p = f.path().to_str().expect("utf-8 path");
        let words = argv(&["tickdb", "--config", p, "rdb", "--quiet"]);
        let typed = typed_flags(&words);
        let m = resolve(&cli(), words).expect("resolves");
        let (path, rdb) = leaf(&m);
        let text = render(&cli(), &path, rdb, &typed);
        assert!(!text.contains("hunter2"), "{text}");
        assert!(
            text.contains("pg_password = \"********\"  # config file"),
            "{text}"
        );
        assert!(text.contains("quiet = true  # flag"), "{text}");
        assert!(text.contains("http_port = 8700  # default"), "{text}");
        assert!(text.contains("# fsmem = (unset)"), "{text}");
    }
}
