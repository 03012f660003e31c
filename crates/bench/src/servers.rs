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

pub struct Tickdb {
    pub child: Child,
    pub http: u16,
    pub ilp: u16,
    pub tp: u16,
    pub data_dir: PathBuf,
}

/// Starts `tickdb ROLE` (up or tp) with `extra` flags.
pub fn start_tickdb(
    bin: &Path,
    work: &Path,
    role: &str,
    name: &str,
    extra: &[&str],
) -> Result<Tickdb> {
    let (http, ilp, tp) = (free_port()?, free_port()?, free_port()?);
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
        .arg("--data-dir")
        .arg(&data_dir)
        .args(extra)
        .env("TICKDB_LOG", "warn");
    if role == "up" {
        cmd.args(["--pg-port", &free_port()?.to_string()]);
    }
    let mut child = Child::spawn(
        &format!("tickdb {role}"),
        &mut cmd,
        &work.join(format!("{name}.log")),
    )?;
    wait_http(&mut child, http, "/health")?;
    Ok(Tickdb {
        child,
        http,
        ilp,
        tp,
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
        std::thread::sleep(Duration::from_millis(25));
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

/// Why QuestDB cannot run here, if it cannot.
pub fn questdb_unavailable() -> Option<String> {
    match Command::new("java").arg("-version").output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!("java -version failed ({})", o.status)),
        Err(e) => Some(format!("no java: {e}")),
    }
}

/// Starts QuestDB with its defaults (WAL tables, no fsync on commit:
/// "nosync"), every listener on 127.0.0.1, PostgreSQL wire and the minimal
/// HTTP server off (not measured), telemetry off.
pub fn start_questdb(work: &Path) -> Result<QuestDb> {
    if let Some(why) = questdb_unavailable() {
        return Err(BenchError::Server(format!("QuestDB not available: {why}")));
    }
    let jar = questdb_jar()?;
    let root = work.join("questdb-root");
    let conf = root.join("conf");
    std::fs::create_dir_all(&conf).map_err(BenchError::io("creating the QuestDB root"))?;
    let (http, ilp) = (free_port()?, free_port()?);
    let server_conf = format!(
        "http.bind.to=127.0.0.1:{http}\n\
         line.tcp.net.bind.to=127.0.0.1:{ilp}\n\
         pg.enabled=false\n\
         http.min.enabled=false\n\
         line.udp.enabled=false\n\
         telemetry.enabled=false\n"
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
