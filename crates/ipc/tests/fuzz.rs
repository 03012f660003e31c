//! The decoder under random and hostile input: random objects round-trip
//! in both byte orders and through compression; mutated, truncated and
//! random messages decode or fail with an error, never a panic, and never
//! allocate past what the message could hold. proptest prints the failing
//! case (and persists its seed) when one fails.

use proptest::prelude::*;
use tickdb_ipc::compress::{compress, decompress};
use tickdb_ipc::encode::encode_ordered;
use tickdb_ipc::{
    decode_message, encode_message, Atom, Header, IpcError, Kind, Limits, MsgType, Table, Vector, K,
};

const LIMITS: Limits = Limits {
    message_bytes_max: 1 << 22,
    depth_max: 16,
};

fn decode_bytes(bytes: &[u8]) -> Result<K, IpcError> {
    if bytes.len() < 8 {
        return Err(IpcError::BadHeader("short".into()));
    }
    let mut h = [0u8; 8];
    h.copy_from_slice(&bytes[..8]);
    let header = Header::parse(&h, &LIMITS)?;
    if header.len != bytes.len() {
        return Err(IpcError::BadHeader("length".into()));
    }
    decode_message(&header, bytes, &LIMITS)
}

fn big_endian_message(k: &K) -> Vec<u8> {
    let mut m = vec![0, 1, 0, 0, 0, 0, 0, 0];
    encode_ordered(k, true, &mut m);
    let n = m.len() as u32;
    m[4..8].copy_from_slice(&n.to_be_bytes());
    m
}

fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_]{0,6}"
}

fn vector() -> impl Strategy<Value = Vector> {
    prop_oneof![
        prop::collection::vec(any::<bool>(), 0..20).prop_map(Vector::Bool),
        prop::collection::vec(any::<[u8; 16]>(), 0..4).prop_map(Vector::Guid),
        prop::collection::vec(any::<u8>(), 0..20).prop_map(Vector::Byte),
        prop::collection::vec(any::<i16>(), 0..20).prop_map(Vector::Short),
        (
            prop::sample::select(vec![
                Kind::Int,
                Kind::Month,
                Kind::Date,
                Kind::Minute,
                Kind::Second,
                Kind::Time
            ]),
            prop::collection::vec(any::<i32>(), 0..20)
        )
            .prop_map(|(k, v)| Vector::Int(k, v)),
        (
            prop::sample::select(vec![Kind::Long, Kind::Timestamp, Kind::Timespan]),
            prop::collection::vec(any::<i64>(), 0..20)
        )
            .prop_map(|(k, v)| Vector::Long(k, v)),
        prop::collection::vec(any::<f32>(), 0..20).prop_map(Vector::Real),
        (
            prop::sample::select(vec![Kind::Float, Kind::Datetime]),
            prop::collection::vec(any::<f64>(), 0..20)
        )
            .prop_map(|(k, v)| Vector::Float(k, v)),
        prop::collection::vec(32u8..127, 0..20).prop_map(Vector::Char),
        prop::collection::vec(name(), 0..10).prop_map(Vector::Symbol),
    ]
}

fn object() -> impl Strategy<Value = K> {
    let leaf = prop_oneof![
        vector().prop_map(|v| {
            if v.is_empty() {
                K::vector(v)
            } else {
                K::Atom(v.get(0).expect("non-empty"))
            }
        }),
        vector().prop_map(K::vector),
        Just(K::Null),
        name().prop_map(K::Error),
    ];
    leaf.prop_recursive(4, 40, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(K::List),
            (prop::collection::vec(inner.clone(), 0..5)).prop_map(|vals| {
                let keys: Vec<String> = (0..vals.len()).map(|i| format!("k{i}")).collect();
                K::dict(K::symbols(&keys), K::List(vals))
            }),
            (1usize..4, 0usize..6).prop_map(|(cols, rows)| {
                K::Table(Table {
                    attr: 0,
                    names: (0..cols).map(|i| format!("c{i}")).collect(),
                    columns: (0..cols)
                        .map(|i| K::vector(Vector::Long(Kind::Long, vec![i as i64; rows])))
                        .collect(),
                })
            }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn objects_round_trip_in_both_byte_orders(k in object()) {
        let le = encode_message(MsgType::Sync, &k, false).unwrap();
        let back = decode_bytes(&le).unwrap();
        // Compared as bytes: NaN is not equal to itself.
        prop_assert_eq!(encode_message(MsgType::Sync, &back, false).unwrap(), le.clone());
        let be = big_endian_message(&k);
        let back = decode_bytes(&be).unwrap();
        prop_assert_eq!(encode_message(MsgType::Sync, &back, false).unwrap(), le);
    }

    #[test]
    fn compression_round_trips(seed in any::<u64>(), runs in 1usize..40) {
        // Repetitive tick-like data (compressible), built from the seed.
        let mut x = seed | 1;
        let mut syms = Vec::new();
        for _ in 0..runs * 50 {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            syms.push(format!("S{}", x % 5));
        }
        let k = K::table(vec!["sym".into()], vec![K::symbols(&syms)]);
        let plain = encode_message(MsgType::Async, &k, false).unwrap();
        if let Some(z) = compress(&plain) {
            prop_assert!(z.len() < plain.len() / 2);
            prop_assert_eq!(decompress(&z, false, 1 << 24).unwrap(), plain.clone());
            prop_assert_eq!(decode_bytes(&z).unwrap(), k);
        }
    }

    #[test]
    fn mutated_messages_never_panic(k in object(), flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..6), cut in any::<usize>()) {
        let mut m = encode_message(MsgType::Sync, &k, false).unwrap();
        for (at, b) in flips {
            let i = 8 + at % (m.len() - 8).max(1);
            if i < m.len() { m[i] = b; }
        }
        let _ = decode_bytes(&m);
        let keep = 8 + cut % (m.len() - 7);
        let mut t = m[..keep.min(m.len())].to_vec();
        let n = t.len() as u32;
        t[4..8].copy_from_slice(&n.to_le_bytes());
        let _ = decode_bytes(&t);
    }

    #[test]
    fn random_bytes_never_panic(body in prop::collection::vec(any::<u8>(), 1..300), big in any::<bool>(), z in any::<bool>()) {
        let mut m = vec![if big { 0 } else { 1 }, 1, z as u8, 0, 0, 0, 0, 0];
        m.extend_from_slice(&body);
        let n = m.len() as u32;
        let l = if big { n.to_be_bytes() } else { n.to_le_bytes() };
        m[4..8].copy_from_slice(&l);
        let _ = decode_bytes(&m);
    }
}

#[test]
fn deep_nesting_is_refused_by_the_bound() {
    let mut k = K::Null;
    for _ in 0..100 {
        k = K::List(vec![k]);
    }
    let m = encode_message(MsgType::Sync, &k, false).unwrap();
    assert!(matches!(
        decode_bytes(&m),
        Err(IpcError::TooDeep { max: 16, .. })
    ));
}

#[test]
fn a_length_larger_than_the_message_is_refused_before_allocating() {
    // A long vector claiming 2^31-1 items in a 14-byte body.
    let mut m = vec![1, 1, 0, 0, 22, 0, 0, 0, 7, 0];
    m.extend_from_slice(&i32::MAX.to_le_bytes());
    m.extend_from_slice(&[0; 8]);
    let e = decode_bytes(&m).unwrap_err();
    assert!(matches!(e, IpcError::Truncated { .. }), "{e}");
    assert!(e.to_string().contains("truncated"), "{e}");
}

#[test]
fn unknown_types_and_bad_headers_are_named() {
    let m = [1, 1, 0, 0, 10, 0, 0, 0, 77, 0];
    let e = decode_bytes(&m).unwrap_err();
    assert_eq!(e, IpcError::UnknownType { ty: 77, at: 8 });
    let e = Header::parse(&[2, 1, 0, 0, 9, 0, 0, 0], &LIMITS).unwrap_err();
    assert!(e.to_string().contains("byte order"), "{e}");
    let e = Header::parse(&[1, 1, 0, 0, 0, 0, 0, 0x7f], &LIMITS).unwrap_err();
    assert!(matches!(e, IpcError::TooLarge { .. }), "{e}");
    let _ = Atom::Bool(true);
}
