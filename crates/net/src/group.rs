//! What a query-group member learns from the kernel about the port it
//! shares (`rp,PORT`, the KX socket sharding whitepaper): how many sockets
//! listen on it now (`/proc/net/tcp`, one LISTEN line per member socket),
//! whether closing a listener migrates its queued connections to the
//! others (`net.ipv4.tcp_migrate_req`), and a lock that members take before
//! leaving the group while busy, so two busy members never both leave and
//! leave the port with no listener.

use std::fs::File;
use std::io::BufRead;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

/// Where the kernel says whether a closed listener's queued connections
/// move to the other listeners of its `SO_REUSEPORT` group (Linux 5.14+).
pub const MIGRATE_REQ_SYSCTL: &str = "/proc/sys/net/ipv4/tcp_migrate_req";

/// `Some(true)` when `net.ipv4.tcp_migrate_req` is 1, `Some(false)` when 0,
/// `None` when the kernel has no such setting.
pub fn migrate_req() -> Option<bool> {
    std::fs::read_to_string(MIGRATE_REQ_SYSCTL)
        .ok()
        .map(|s| s.trim() != "0")
}

/// The kernel's hex form of an address in `/proc/net/tcp{,6}`: each 32-bit
/// word in host byte order, then the port.
fn proc_form(addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        IpAddr::V4(v4) => format!("{:08X}", u32::from_ne_bytes(v4.octets())),
        IpAddr::V6(v6) => v6
            .octets()
            .chunks(4)
            .map(|w| format!("{:08X}", u32::from_ne_bytes([w[0], w[1], w[2], w[3]])))
            .collect(),
    };
    format!("{ip}:{:04X}", addr.port())
}

/// TCP state LISTEN as `/proc/net/tcp` writes it.
const TCP_LISTEN: &str = "0A";

/// Sockets listening on `addr` in this network namespace: every member of
/// its query group that is listening now, this process's included.
pub fn listeners_on(addr: SocketAddr) -> std::io::Result<usize> {
    let table = if addr.is_ipv4() {
        "/proc/net/tcp"
    } else {
        "/proc/net/tcp6"
    };
    let want = proc_form(addr);
    let mut n = 0;
    for line in std::io::BufReader::new(File::open(table)?).lines().skip(1) {
        let line = line?;
        let mut f = line.split_whitespace();
        let (Some(_sl), Some(local), Some(_remote), Some(st)) =
            (f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        if st == TCP_LISTEN && local.eq_ignore_ascii_case(&want) {
            n += 1;
        }
    }
    Ok(n)
}

/// The lock a member holds while it decides to leave the group on `addr`.
pub struct LeaveLock {
    _file: File,
}

/// Takes the group's leave lock (a file lock in the temp directory, keyed
/// by address, shared by every process of the same machine and namespace
/// that uses the same temp directory).
pub fn leave_lock(addr: SocketAddr) -> std::io::Result<LeaveLock> {
    let path: PathBuf = std::env::temp_dir().join(format!(
        "tickdb-query-group-{}-{}.lock",
        addr.ip().to_string().replace(':', "_"),
        addr.port()
    ));
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    file.lock()?;
    Ok(LeaveLock { _file: file })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_every_listening_member_of_a_shared_port() {
        let spec = crate::ListenSpec {
            port: 0,
            reuse_port: true,
        };
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let a = crate::bind_tcp(ip, &spec, "test").unwrap();
        let addr = a.local_addr().unwrap();
        assert_eq!(listeners_on(addr).unwrap(), 1);
        let spec = crate::ListenSpec {
            port: addr.port(),
            reuse_port: true,
        };
        let bound = crate::bind_socket(ip, &spec, "test").unwrap();
        // Bound but not listening: not a member yet.
        assert_eq!(listeners_on(addr).unwrap(), 1);
        let b = crate::listen_socket(bound, ip, &spec, "test").unwrap();
        assert_eq!(listeners_on(addr).unwrap(), 2);
        drop(a);
        assert_eq!(listeners_on(addr).unwrap(), 1);
        drop(b);
        assert_eq!(listeners_on(addr).unwrap(), 0);
    }

    #[test]
    fn the_leave_lock_is_exclusive() {
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let held = leave_lock(addr).unwrap();
        let path = std::env::temp_dir().join("tickdb-query-group-127.0.0.1-1.lock");
        let other = File::options().write(true).open(path).unwrap();
        assert!(other.try_lock().is_err());
        drop(held);
        assert!(other.try_lock().is_ok());
    }
}
