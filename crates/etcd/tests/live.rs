//! Against a real etcd: each test starts its own member on free loopback
//! ports with its own data dir, and a guard kills that process (by its
//! handle, never by name) however the test ends. Without `etcd` on PATH the
//! tests say so and pass.

use std::fs::File;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tickdb_etcd::{Client, Compare, Error, Op, OpResponse};

const REQUEST_TIMEOUT_MS: u64 = 2_000;
const STARTUP_TIMEOUT_MS: u64 = 30_000;
const STARTUP_ATTEMPTS: usize = 3;

struct Etcd {
    child: Child,
    endpoint: String,
    log: PathBuf,
    // Dropped after the child is killed (fields drop after Drop::drop), so
    // etcd never sees its data dir vanish under it.
    _dir: tempfile::TempDir,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Etcd {
    fn client(&self) -> Client {
        Client::new(
            vec![self.endpoint.clone()],
            Duration::from_millis(REQUEST_TIMEOUT_MS),
        )
        .expect("client")
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

/// Two distinct free ports: both listeners are held until both are known.
fn free_ports() -> (u16, u16) {
    let a = TcpListener::bind("127.0.0.1:0").expect("bind");
    let b = TcpListener::bind("127.0.0.1:0").expect("bind");
    (
        a.local_addr().expect("addr").port(),
        b.local_addr().expect("addr").port(),
    )
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

async fn start_etcd() -> Option<Etcd> {
    match Command::new("etcd").arg("--version").output() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("skipping: etcd is not on PATH ({e}); install etcd-server to run these");
            return None;
        }
        Err(e) => panic!("cannot run etcd --version: {e}"),
        Ok(_) => {}
    }
    let mut last_log = String::new();
    for attempt in 1..=STARTUP_ATTEMPTS {
        let dir = tempfile::tempdir().expect("tempdir");
        let (client_port, peer_port) = free_ports();
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let log = dir.path().join("etcd.log");
        let out = File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let mut cmd = Command::new("etcd");
        // An operator's ETCD_* settings would override the flags below.
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("ETCD_") {
                cmd.env_remove(k);
            }
        }
        cmd.arg("--name")
            .arg("t")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("t={peer_url}")])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let child = cmd.spawn().expect("spawn etcd");
        let mut etcd = Etcd {
            child,
            endpoint: format!("127.0.0.1:{client_port}"),
            log,
            _dir: dir,
        };
        let client =
            Client::new(vec![etcd.endpoint.clone()], Duration::from_millis(500)).expect("client");
        let deadline = Instant::now() + Duration::from_millis(STARTUP_TIMEOUT_MS);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = etcd.child.try_wait() {
                // Most likely a port taken between our probe and etcd's bind.
                last_log = etcd.log_tail();
                eprintln!("etcd attempt {attempt} exited with {status}:\n{last_log}");
                break;
            }
            if client.get("startup-probe").await.is_ok() {
                return Some(etcd);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if etcd.child.try_wait().ok().flatten().is_none() {
            last_log = etcd.log_tail();
        }
    }
    panic!("etcd did not start in {STARTUP_ATTEMPTS} attempts; log tail:\n{last_log}");
}

#[tokio::test]
async fn put_get_delete_and_prefix() {
    let Some(etcd) = start_etcd().await else {
        return;
    };
    let c = etcd.client();

    assert_eq!(c.get("/t/a").await.expect("get"), None);
    let rev = c.put("/t/a", b"1", None).await.expect("put");
    let kv = c.get("/t/a").await.expect("get").expect("present");
    assert_eq!(kv.key, "/t/a");
    assert_eq!(kv.value, b"1");
    assert_eq!(kv.create_revision, rev);
    assert_eq!(kv.mod_revision, rev);
    assert_eq!(kv.version, 1);
    assert_eq!(kv.lease, 0);

    let rev2 = c.put("/t/a", b"\x00\xffbinary", None).await.expect("put");
    assert!(rev2 > rev);
    let kv = c.get("/t/a").await.expect("get").expect("present");
    assert_eq!(kv.value, b"\x00\xffbinary");
    assert_eq!(
        (kv.create_revision, kv.mod_revision, kv.version),
        (rev, rev2, 2)
    );

    c.put("/t/b", b"2", None).await.expect("put");
    c.put("/t/c/d", b"3", None).await.expect("put");
    c.put("/u", b"outside", None).await.expect("put");
    let keys: Vec<String> = c
        .get_prefix("/t/")
        .await
        .expect("prefix")
        .into_iter()
        .map(|kv| kv.key)
        .collect();
    assert_eq!(keys, ["/t/a", "/t/b", "/t/c/d"]);
    let range = c.range("/t/", true).await.expect("range");
    assert_eq!(range.kvs.len(), 3);
    assert!(range.revision >= rev2);
    assert_eq!(c.get_prefix("/none/").await.expect("prefix"), vec![]);

    assert_eq!(c.delete("/t/a").await.expect("delete"), 1);
    assert_eq!(c.delete("/t/a").await.expect("delete"), 0);
    assert_eq!(c.get("/t/a").await.expect("get"), None);
    assert_eq!(c.get_prefix("/t/").await.expect("prefix").len(), 2);
}

#[tokio::test]
async fn lease_expires_when_not_kept_alive() {
    let Some(etcd) = start_etcd().await else {
        return;
    };
    let c = etcd.client();
    let lease = c.grant(1).await.expect("grant");
    c.put("/leader", b"node-a", Some(lease)).await.expect("put");
    let kv = c.get("/leader").await.expect("get").expect("present");
    assert_eq!(kv.lease, lease);
    let ttl = c.lease_ttl(lease).await.expect("ttl");
    assert!(ttl > 0, "fresh lease ttl {ttl}");

    // etcd raises a 1 s TTL to its minimum (2 s by default) and checks
    // expiry every 500 ms: allow well beyond both.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if c.get("/leader").await.expect("get").is_none() {
            break;
        }
        assert!(Instant::now() < deadline, "leased key outlived its lease");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let remaining = c.keepalive_once(lease).await.expect("keepalive");
    assert!(
        remaining <= 0,
        "keepalive of an expired lease said {remaining}"
    );
    assert_eq!(c.lease_ttl(lease).await.expect("ttl"), -1);
    let e = c
        .put("/leader", b"node-a", Some(lease))
        .await
        .expect_err("put under an expired lease");
    assert!(e.is_lease_not_found(), "{e}");
    assert!(e.to_string().contains(&etcd.endpoint), "{e}");
    assert!(!c.revoke(lease).await.expect("revoke"));
}

#[tokio::test]
async fn keepalive_keeps_the_lease_and_revoke_ends_it() {
    let Some(etcd) = start_etcd().await else {
        return;
    };
    let c = etcd.client();
    let lease = c.grant(2).await.expect("grant");
    c.put("/leader", b"node-a", Some(lease)).await.expect("put");
    // Twice the TTL, renewed every half second.
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let ttl = c.keepalive_once(lease).await.expect("keepalive");
        assert!(ttl > 0, "kept-alive lease reported ttl {ttl}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(c.get("/leader").await.expect("get").is_some());

    assert!(c.revoke(lease).await.expect("revoke"));
    assert_eq!(c.get("/leader").await.expect("get"), None);
    assert!(c.keepalive_once(lease).await.expect("keepalive") <= 0);
    assert!(!c.revoke(lease).await.expect("revoke again"));
}

#[tokio::test]
async fn leader_key_is_created_once_and_guarded_by_revision() {
    let Some(etcd) = start_etcd().await else {
        return;
    };
    let c = etcd.client();
    let key = "/tickdb/leader";
    let lease_a = c.grant(30).await.expect("grant");
    let lease_b = c.grant(30).await.expect("grant");

    let acquire = |who: &'static str, lease: i64| {
        c.txn(
            vec![Compare::absent(key)],
            vec![Op::put(key, who, Some(lease))],
            vec![Op::get(key)],
        )
    };
    let first = acquire("node-a", lease_a).await.expect("txn");
    assert!(first.succeeded);
    assert_eq!(first.responses, vec![OpResponse::Put]);
    assert_eq!(first.kvs().count(), 0);

    let second = acquire("node-b", lease_b).await.expect("txn");
    assert!(!second.succeeded);
    assert_eq!(
        second.revision, first.revision,
        "a failed txn writes nothing"
    );
    let holder = second.kvs().next().expect("the holder").clone();
    assert_eq!(holder.value, b"node-a");
    assert_eq!(holder.lease, lease_a);
    assert_eq!(holder.mod_revision, first.revision);

    // The leader rewrites its key only if nobody wrote it since it read it.
    let update = c
        .txn(
            vec![Compare::mod_revision(key, holder.mod_revision)],
            vec![Op::put(key, "node-a:2", Some(lease_a))],
            vec![Op::get(key)],
        )
        .await
        .expect("txn");
    assert!(update.succeeded);
    assert!(update.revision > first.revision);
    let stale = c
        .txn(
            vec![Compare::mod_revision(key, holder.mod_revision)],
            vec![Op::put(key, "node-b", Some(lease_b))],
            vec![Op::get(key)],
        )
        .await
        .expect("txn");
    assert!(!stale.succeeded);
    assert_eq!(
        stale.kvs().next().map(|kv| kv.value.as_slice()),
        Some(&b"node-a:2"[..])
    );

    // Value and version guards, and a step-down that deletes only our key.
    let wrong_value = c
        .txn(
            vec![Compare::value(key, "node-b")],
            vec![Op::delete(key)],
            vec![],
        )
        .await
        .expect("txn");
    assert!(!wrong_value.succeeded);
    assert!(wrong_value.responses.is_empty());
    let step_down = c
        .txn(
            vec![Compare::value(key, "node-a:2"), Compare::version(key, 2)],
            vec![Op::delete(key), Op::get(key)],
            vec![],
        )
        .await
        .expect("txn");
    assert!(step_down.succeeded);
    assert_eq!(
        step_down.responses,
        vec![
            OpResponse::Delete { deleted: 1 },
            OpResponse::Get { kvs: vec![] }
        ]
    );
    assert!(acquire("node-b", lease_b).await.expect("txn").succeeded);
}

#[tokio::test]
async fn fails_over_past_dead_and_hung_endpoints() {
    let Some(etcd) = start_etcd().await else {
        return;
    };
    let dead = format!("127.0.0.1:{}", closed_port());
    let c = Client::new(
        vec![
            format!("http://{dead}"),
            format!("http://{}", etcd.endpoint),
        ],
        Duration::from_millis(REQUEST_TIMEOUT_MS),
    )
    .expect("client");
    assert_eq!(c.preferred_endpoint(), dead);
    c.put("/k", b"v", None).await.expect("put fails over");
    assert_eq!(c.preferred_endpoint(), etcd.endpoint);
    assert!(c.get("/k").await.expect("get").is_some());

    // A member that accepts connections and never answers costs one request
    // timeout, then the call moves on. The kernel completes the handshakes
    // into the listener's backlog; nobody accepts.
    let hung = TcpListener::bind("127.0.0.1:0").expect("bind");
    let hung_ep = hung.local_addr().expect("addr").to_string();
    let c = Client::new(
        vec![hung_ep.clone(), etcd.endpoint.clone()],
        Duration::from_millis(300),
    )
    .expect("client");
    let started = Instant::now();
    assert_eq!(
        c.get("/k").await.expect("get").map(|kv| kv.value),
        Some(b"v".to_vec())
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    // The next call starts from the member that answered: no timeout.
    let started = Instant::now();
    c.get("/k").await.expect("get");
    assert!(started.elapsed() < Duration::from_millis(300));

    // When nothing answers, the error names every endpoint tried.
    let dead2 = format!("127.0.0.1:{}", closed_port());
    let c = Client::new(
        vec![dead.clone(), hung_ep.clone(), dead2.clone()],
        Duration::from_millis(200),
    )
    .expect("client");
    let e = c.get("/k").await.expect_err("no endpoint answers");
    assert!(
        matches!(&e, Error::Unreachable { errors } if errors.len() == 3),
        "{e:?}"
    );
    let msg = e.to_string();
    for ep in [&dead, &hung_ep, &dead2] {
        assert!(msg.contains(ep.as_str()), "{ep} missing from: {msg}");
    }
    assert!(
        msg.contains("cannot connect") && msg.contains("200 ms"),
        "{msg}"
    );
    drop(hung);
}
