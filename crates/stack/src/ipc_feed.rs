//! The feed's kdb+ IPC sink (`tickdb feed --ipc HOST:PORT`): publishes as a
//! kdb+ feed handler does, with async `.u.upd[`t; columns]` messages (one
//! per table per burst), and ends with the empty sync chaser, whose `::`
//! says every update before it was acknowledged.

use crate::error::{Result, StackError};
use crate::gen::{dollars, Tick};
use std::io::{Read, Write};
use std::net::TcpStream;
use tickdb_ipc::temporal::timestamp_from_unix_ns;
use tickdb_ipc::{Kind, MsgType, Vector, K};

pub struct IpcSink {
    addr: String,
    sock: TcpStream,
}

/// Columns of one table being built for one message.
#[derive(Default)]
struct Cols {
    time: Vec<i64>,
    sym: Vec<String>,
    a: Vec<f64>,
    b: Vec<f64>,
    c: Vec<i64>,
    d: Vec<i64>,
}

impl IpcSink {
    /// Connects and logs in (the node's PostgreSQL wire user and password).
    pub fn connect(addr: &str, user: &str, password: &str) -> Result<IpcSink> {
        let mut sock = TcpStream::connect(addr)
            .map_err(StackError::io(format!("connecting to kdb+ IPC at {addr}")))?;
        sock.set_nodelay(true)
            .map_err(StackError::io("kdb+ IPC nodelay"))?;
        let agreed = tickdb_ipc::handshake::login(&mut sock, user, password)
            .map_err(StackError::io("kdb+ IPC handshake"))?;
        if agreed.is_none() {
            return Err(StackError::Server(format!(
                "kdb+ IPC at {addr} refused the login (wrong user or password?)"
            )));
        }
        Ok(IpcSink {
            addr: addr.to_string(),
            sock,
        })
    }

    /// Sends `ticks` (each with its time, Unix ns) as async `.u.upd`s;
    /// returns the bytes sent.
    pub fn send(&mut self, ticks: &[(Tick, i64)], name: &dyn Fn(u32) -> String) -> Result<u64> {
        let (mut trade, mut quote) = (Cols::default(), Cols::default());
        for (t, time) in ticks {
            match *t {
                Tick::Trade { sym, price, size } => {
                    trade.time.push(timestamp_from_unix_ns(*time));
                    trade.sym.push(name(sym));
                    trade.a.push(dollars(price));
                    trade.c.push(size);
                }
                Tick::Quote {
                    sym,
                    bid,
                    ask,
                    bsize,
                    asize,
                } => {
                    quote.time.push(timestamp_from_unix_ns(*time));
                    quote.sym.push(name(sym));
                    quote.a.push(dollars(bid));
                    quote.b.push(dollars(ask));
                    quote.c.push(bsize);
                    quote.d.push(asize);
                }
            }
        }
        let mut bytes = 0u64;
        if !trade.time.is_empty() {
            let data = vec![
                K::vector(Vector::Long(Kind::Timestamp, trade.time)),
                K::vector(Vector::Symbol(trade.sym)),
                K::vector(Vector::Float(Kind::Float, trade.a)),
                K::vector(Vector::Long(Kind::Long, trade.c)),
            ];
            bytes += self.upd("trade", data)?;
        }
        if !quote.time.is_empty() {
            let data = vec![
                K::vector(Vector::Long(Kind::Timestamp, quote.time)),
                K::vector(Vector::Symbol(quote.sym)),
                K::vector(Vector::Float(Kind::Float, quote.a)),
                K::vector(Vector::Float(Kind::Float, quote.b)),
                K::vector(Vector::Long(Kind::Long, quote.c)),
                K::vector(Vector::Long(Kind::Long, quote.d)),
            ];
            bytes += self.upd("quote", data)?;
        }
        Ok(bytes)
    }

    fn upd(&mut self, table: &str, columns: Vec<K>) -> Result<u64> {
        let msg = K::List(vec![
            K::symbol(".u.upd"),
            K::symbol(table),
            K::List(columns),
        ]);
        let bytes = tickdb_ipc::encode_message(MsgType::Async, &msg, false)
            .map_err(|e| StackError::BadInput(format!("encoding .u.upd: {e}")))?;
        self.sock
            .write_all(&bytes)
            .map_err(StackError::io(format!("kdb+ IPC write to {}", self.addr)))?;
        Ok(bytes.len() as u64)
    }

    /// The chaser: Ok once every earlier update was acknowledged.
    pub fn chase(&mut self) -> Result<()> {
        let msg = tickdb_ipc::encode_message(MsgType::Sync, &K::string(""), false)
            .map_err(|e| StackError::BadInput(e.to_string()))?;
        self.sock
            .write_all(&msg)
            .map_err(StackError::io("kdb+ IPC chaser"))?;
        let mut h = [0u8; 8];
        self.sock
            .read_exact(&mut h)
            .map_err(StackError::io("kdb+ IPC chaser's answer"))?;
        let limits = tickdb_ipc::Limits {
            message_bytes_max: 1 << 20,
            depth_max: 8,
        };
        let header = tickdb_ipc::Header::parse(&h, &limits)
            .map_err(|e| StackError::Server(format!("the chaser's answer: {e}")))?;
        let mut m = vec![0u8; header.len];
        m[..8].copy_from_slice(&h);
        self.sock
            .read_exact(&mut m[8..])
            .map_err(StackError::io("kdb+ IPC chaser's answer"))?;
        match tickdb_ipc::decode_message(&header, &m, &limits) {
            Ok(K::Error(e)) => Err(StackError::Server(format!(
                "kdb+ IPC at {}: '{e}",
                self.addr
            ))),
            Ok(_) => Ok(()),
            Err(e) => Err(StackError::Server(format!("the chaser's answer: {e}"))),
        }
    }
}
