//! The servers under test: tickdb (this very binary, as a child process on
//! fresh free ports and a fresh data directory) and QuestDB (the 9.x jar from
//! Maven Central, bound to 127.0.0.1 with telemetry off).

use crate::child::{self, free_port, Child};
use crate::error::{BenchError, Result};
use crate::http::HttpConn;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub const QUESTDB_VERSION: &str = "9.3.4";
/// A start may replay a large journal (`bench restart`) before it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(600);
/// Pause between readiness polls. The restart benchmark reads its times from
/// this wait, so they are at most this late; each poll costs the server a
/// request (tens of µs) while it replays, about 1% of a core at this pace.
const READY_POLL_MS: u64 = 5;

pub struct Tickdb {
    pub child: Child,
    pub http: u16,
    pub ilp: u16,
    pub tp: u16,
    /// The PostgreSQL port (`up` only).
    pub pg: Option<u16>,
    /// The replication port (`--repl-port`): standbys follow it.
    pub repl: u16,
    pub data_dir: PathBuf,
}

/// Starts of a server whose ports were taken between `free_port` and its
/// bind before the benchmark gives up.
const PORT_RACE_TRIES: usize = 3;

/// Starts `tickdb ROLE` (up or tp) with `extra` flags on free ports. A port
/// found free can be taken before the server binds it (the benchmark's own
/// loopback connections draw ephemeral ports from the same range); the
/// server then exits naming the port, and it is started again on fresh ones.
/// That happens at bind, before any replay, so a timed start loses only a
/// process start.
pub fn start_tickdb(
    bin: &Path,
    work: &Path,
    role: &str,
    name: &str,
    extra: &[&str],
) -> Result<Tickdb> {
    start_tickdb_env(bin, work, role, name, extra, &[])
}

/// `start_tickdb` with environment variables set for the server (a
/// replication secret that a primary and its standbys share).
pub fn start_tickdb_env(
    bin: &Path,
    work: &Path,
    role: &str,
    name: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Result<Tickdb> {
    let log = work.join(format!("{name}.log"));
    let mut tries = 0;
    loop {
        tries += 1;
        match start_tickdb_once(bin, work, role, name, extra, env, &log) {
            Err(BenchError::Server(_))
                if tries < PORT_RACE_TRIES
                    && std::fs::read_to_string(&log)
                        .is_ok_and(|l| l.contains("address already in use")) =>
            {
                eprintln!("tickdb {role}: a port was taken before it bound it; starting it on fresh ports");
            }
            r => return r,
        }
    }
}

fn start_tickdb_once(
    bin: &Path,
    work: &Path,
    role: &str,
    name: &str,
    extra: &[&str],
    env: &[(&str, &str)],
    log: &Path,
) -> Result<Tickdb> {
    let (http, ilp, tp, repl) = (free_port()?, free_port()?, free_port()?, free_port()?);
    let data_dir = work.join(format!("{name}-data"));
    let mut cmd = Command::new(bin);
    cmd.arg(role)
        .args([
            "--http-port",
            &http.to_string(),
            "--ilp-port",
            &ilp.to_string(),
        ])
        .args(["--tp-port", &tp.to_string()])
        .args(["--repl-port", &repl.to_string()])
        .arg("--data-dir")
        .arg(&data_dir)
        .args(extra)
        .env("TICKDB_LOG", "warn")
        .envs(env.iter().copied());
    let pg = if role == "up" {
        let p = free_port()?;
        cmd.args(["--pg-port", &p.to_string()]);
        Some(p)
    } else {
        None
    };
    let mut child = Child::spawn(&format!("tickdb {role}"), &mut cmd, log)?;
    wait_http(&mut child, http, "/health")?;
    Ok(Tickdb {
        child,
        http,
        ilp,
        tp,
        pg,
        repl,
        data_dir,
    })
}

pub fn wait_http(child: &mut Child, port: u16, path: &str) -> Result<()> {
    let t0 = Instant::now();
    loop {
        child::check_interrupt()?;
        child.check_alive()?;
        if let Ok((200, _)) = HttpConn::connect(port).and_then(|mut c| c.request("GET", path, b""))
        {
            return Ok(());
        }
        if t0.elapsed() > READY_TIMEOUT {
            return Err(BenchError::Server(format!(
                "not ready after {READY_TIMEOUT:?}:\n{}",
                child::log_tail(&child.log)
            )));
        }
        std::thread::sleep(Duration::from_millis(READY_POLL_MS));
    }
}

pub struct QuestDb {
    pub child: Child,
    pub http: u16,
    pub ilp: u16,
}

/// Where downloaded peers are kept between runs.
pub fn cache_dir() -> PathBuf {
    if let Ok(d) = std::env::var("TICKDB_BENCH_CACHE") {
        return PathBuf::from(d);
    }
    let home = std::env::var("HOME").unwrap_or_else(|_| "/tmp".into());
    PathBuf::from(home).join(".cache/tickdb-bench")
}

/// Downloads the QuestDB jar once (Maven Central).
pub fn questdb_jar() -> Result<PathBuf> {
    let dir = cache_dir();
    std::fs::create_dir_all(&dir).map_err(BenchError::io(format!("creating {}", dir.display())))?;
    let jar = dir.join(format!("questdb-{QUESTDB_VERSION}.jar"));
    if jar.exists() {
        return Ok(jar);
    }
    let url = format!(
        "https://repo1.maven.org/maven2/org/questdb/questdb/{QUESTDB_VERSION}/questdb-{QUESTDB_VERSION}.jar"
    );
    eprintln!("downloading {url}");
    let tmp = dir.join(format!("questdb-{QUESTDB_VERSION}.jar.part"));
    let st = Command::new("curl")
        .args(["-fsSL", "--retry", "3", "-o"])
        .arg(&tmp)
        .arg(&url)
        .status()
        .map_err(BenchError::io("running curl"))?;
    if !st.success() {
        return Err(BenchError::Server(format!(
            "downloading {url} failed ({st})"
        )));
    }
    std::fs::rename(&tmp, &jar).map_err(BenchError::io("placing the QuestDB jar"))?;
    Ok(jar)
}

/// Why QuestDB cannot run here (no java, or its jar cannot be fetched), if
/// it cannot: a benchmark then reports its peer as not measured. An
/// interrupt is passed on.
pub fn questdb_missing() -> Result<Option<String>> {
    if let Some(why) = questdb_unavailable() {
        return Ok(Some(why));
    }
    match questdb_jar() {
        Ok(_) => Ok(None),
        Err(BenchError::Interrupted) => Err(BenchError::Interrupted),
        Err(e) => Ok(Some(e.to_string())),
    }
}

/// Why QuestDB cannot run here, if it cannot.
pub fn questdb_unavailable() -> Option<String> {
    match Command::new("java").arg("-version").output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!("java -version failed ({})", o.status)),
        Err(e) => Some(format!("no java: {e}")),
    }
}

/// Starts a fresh QuestDB with its defaults (WAL tables, no fsync on
/// commit: "nosync"), every listener on 127.0.0.1, PostgreSQL wire and the
/// minimal HTTP server off (not measured), telemetry off, and `extra` lines
/// appended to its server.conf (each `key=value\n`; empty for its defaults):
/// a benchmark's documented tuning for one case.
pub fn start_questdb_with(work: &Path, extra: &str) -> Result<QuestDb> {
    if let Some(why) = questdb_unavailable() {
        return Err(BenchError::Server(format!("QuestDB not available: {why}")));
    }
    let jar = questdb_jar()?;
    let root = work.join("questdb-root");
    // Every start is a fresh server: no tables left by an earlier one.
    if root.exists() {
        std::fs::remove_dir_all(&root).map_err(BenchError::io("clearing the QuestDB root"))?;
    }
    let conf = root.join("conf");
    std::fs::create_dir_all(&conf).map_err(BenchError::io("creating the QuestDB root"))?;
    let (http, ilp) = (free_port()?, free_port()?);
    let server_conf = format!(
        "http.bind.to=127.0.0.1:{http}\n\
         line.tcp.net.bind.to=127.0.0.1:{ilp}\n\
         pg.enabled=false\n\
         http.min.enabled=false\n\
         line.udp.enabled=false\n\
         telemetry.enabled=false\n\
         {extra}"
    );
    std::fs::write(conf.join("server.conf"), server_conf)
        .map_err(BenchError::io("writing server.conf"))?;
    let mut cmd = Command::new("java");
    cmd.arg("-p")
        .arg(&jar)
        .args(["-m", "io.questdb/io.questdb.ServerMain", "-d"])
        .arg(&root);
    let mut child = Child::spawn("QuestDB", &mut cmd, &work.join("questdb.log"))?;
    wait_http(&mut child, http, "/exec?query=select%201")?;
    Ok(QuestDb { child, http, ilp })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A server that loses the port race on its first start is started again
    /// on fresh ports; one that fails for another reason is not.
    #[test]
    fn a_lost_port_race_starts_the_server_again() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("fake-tickdb");
        // First start: exit as tickdb does when a port is taken. Later ones:
        // answer 200 on the --http-port given.
        let script = format!(
            r#"#!/bin/sh
if [ ! -e {marker} ]; then
  touch {marker}
  echo "tickdb: cannot listen for HTTP on 127.0.0.1:1: address already in use" >&2
  exit 1
fi
while [ "$1" != "--http-port" ]; do shift; done
exec python3 -c 'import http.server as h, sys
class H(h.BaseHTTPRequestHandler):
    def do_GET(s): s.send_response(200); s.send_header("Content-Length", "0"); s.end_headers()
h.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()' "$2"
"#,
            marker = dir.path().join("started-once").display()
        );
        std::fs::write(&bin, script).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut s = start_tickdb(&bin, dir.path(), "tp", "fake", &[]).unwrap();
        s.child.stop(Duration::from_secs(5));

        let failing = dir.path().join("failing");
        std::fs::write(&failing, "#!/bin/sh\necho 'bad schema' >&2\nexit 1\n").unwrap();
        std::fs::set_permissions(&failing, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = start_tickdb(&failing, dir.path(), "tp", "failing", &[])
            .err()
            .expect("a server that cannot start is an error");
        assert!(err.to_string().contains("bad schema"), "{err}");
    }
}
