//! KX's published serialization examples ("Serialization examples",
//! code.kx.com/q/kb/serialization/) as fixtures: each little-endian message
//! as the page prints it, and the same message big-endian (as a Java client
//! sends it). Each must decode to the object, and the object must encode
//! to the published bytes.

use tickdb_ipc::encode::encode_ordered;
use tickdb_ipc::{
    decode_message, encode_message, Atom, Header, Kind, Limits, MsgType, Table, Vector, K,
};

const LIMITS: Limits = Limits {
    message_bytes_max: 1 << 20,
    depth_max: 64,
};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("fixture hex"))
        .collect()
}

fn ints(v: &[i32]) -> K {
    K::vector(Vector::Int(Kind::Int, v.to_vec()))
}

fn syms(v: &[&str]) -> K {
    K::symbols(v)
}

fn table(attr: u8, names: &[&str], columns: Vec<K>) -> K {
    K::Table(Table {
        attr,
        names: names.iter().map(|s| s.to_string()).collect(),
        columns,
    })
}

/// (what the page serializes, little-endian bytes, big-endian bytes, the object)
fn fixtures() -> Vec<(&'static str, Vec<u8>, Vec<u8>, K)> {
    vec![
        (
            "-8!1i",
            hex("010000000d000000 fa 01000000"),
            hex("000000000000000d fa 00000001"),
            K::Atom(Atom::Int(Kind::Int, 1)),
        ),
        (
            "-8!enlist 1i",
            hex("0100000012000000 06 00 01000000 01000000"),
            hex("0000000000000012 06 00 00000001 00000001"),
            ints(&[1]),
        ),
        (
            "-8!`byte$til 5",
            hex("0100000013000000 04 00 05000000 0001020304"),
            hex("0000000000000013 04 00 00000005 0001020304"),
            K::vector(Vector::Byte(vec![0, 1, 2, 3, 4])),
        ),
        (
            "-8!`byte$enlist til 5",
            hex("0100000019000000 00 00 01000000 04 00 05000000 0001020304"),
            hex("0000000000000019 00 00 00000001 04 00 00000005 0001020304"),
            K::List(vec![K::vector(Vector::Byte(vec![0, 1, 2, 3, 4]))]),
        ),
        (
            "-8!`a`b!2 3i",
            hex("0100000021000000 63 0b 00 02000000 6100 6200 06 00 02000000 02000000 03000000"),
            hex("0000000000000021 63 0b 00 00000002 6100 6200 06 00 00000002 00000002 00000003"),
            K::dict(syms(&["a", "b"]), ints(&[2, 3])),
        ),
        (
            "-8!`s#`a`b!2 3i",
            hex("0100000021000000 7f 0b 01 02000000 6100 6200 06 00 02000000 02000000 03000000"),
            hex("0000000000000021 7f 0b 01 00000002 6100 6200 06 00 00000002 00000002 00000003"),
            K::Dict {
                sorted: true,
                keys: Box::new(K::Vector {
                    attr: 1,
                    v: Vector::Symbol(vec!["a".into(), "b".into()]),
                }),
                values: Box::new(ints(&[2, 3])),
            },
        ),
        (
            "-8!`a`b!enlist each 2 3i",
            hex("010000002d000000 63 0b 00 02000000 6100 6200 00 00 02000000
                 06 00 01000000 02000000 06 00 01000000 03000000"),
            hex("000000000000002d 63 0b 00 00000002 6100 6200 00 00 00000002
                 06 00 00000001 00000002 06 00 00000001 00000003"),
            K::dict(syms(&["a", "b"]), K::List(vec![ints(&[2]), ints(&[3])])),
        ),
        (
            "-8!([]a:enlist 2i;b:enlist 3i)",
            hex(
                "010000002f000000 62 00 63 0b 00 02000000 6100 6200 00 00 02000000
                 06 00 01000000 02000000 06 00 01000000 03000000",
            ),
            hex(
                "000000000000002f 62 00 63 0b 00 00000002 6100 6200 00 00 00000002
                 06 00 00000001 00000002 06 00 00000001 00000003",
            ),
            table(0, &["a", "b"], vec![ints(&[2]), ints(&[3])]),
        ),
        (
            "-8!`s#([]a:enlist 2i;b:enlist 3i)",
            hex(
                "010000002f000000 62 01 63 0b 00 02000000 6100 6200 00 00 02000000
                 06 03 01000000 02000000 06 00 01000000 03000000",
            ),
            hex(
                "000000000000002f 62 01 63 0b 00 00000002 6100 6200 00 00 00000002
                 06 03 00000001 00000002 06 00 00000001 00000003",
            ),
            table(
                1,
                &["a", "b"],
                vec![
                    K::Vector {
                        attr: 3,
                        v: Vector::Int(Kind::Int, vec![2]),
                    },
                    ints(&[3]),
                ],
            ),
        ),
        (
            "-8!([a:enlist 2i]b:enlist 3i)",
            hex("010000003f000000 63
                 62 00 63 0b 00 01000000 6100 00 00 01000000 06 00 01000000 02000000
                 62 00 63 0b 00 01000000 6200 00 00 01000000 06 00 01000000 03000000"),
            hex("000000000000003f 63
                 62 00 63 0b 00 00000001 6100 00 00 00000001 06 00 00000001 00000002
                 62 00 63 0b 00 00000001 6200 00 00 00000001 06 00 00000001 00000003"),
            K::dict(
                table(0, &["a"], vec![ints(&[2])]),
                table(0, &["b"], vec![ints(&[3])]),
            ),
        ),
    ]
}

fn decode_whole(bytes: &[u8]) -> K {
    let mut h = [0u8; 8];
    h.copy_from_slice(&bytes[..8]);
    let header = Header::parse(&h, &LIMITS).expect("header");
    assert_eq!(header.len, bytes.len());
    decode_message(&header, bytes, &LIMITS).expect("decodes")
}

#[test]
fn published_examples_decode_in_both_byte_orders_and_encode_to_the_published_bytes() {
    for (what, le, be, k) in fixtures() {
        assert_eq!(decode_whole(&le), k, "{what} little-endian");
        assert_eq!(decode_whole(&be), k, "{what} big-endian");
        let ours = encode_message(MsgType::Async, &k, false).unwrap();
        assert_eq!(ours, le, "{what}: encoded little-endian");
        let mut big = vec![0, 0, 0, 0];
        big.extend_from_slice(&(be.len() as u32).to_be_bytes());
        encode_ordered(&k, true, &mut big);
        assert_eq!(big, be, "{what}: encoded big-endian");
    }
}

#[test]
fn a_lambda_is_decoded_as_a_function_that_is_named_not_run() {
    // -8!{x+y}
    let k = decode_whole(&hex("0100000015000000 64 00 0a 00 05000000 7b782b797d"));
    assert_eq!(
        k,
        K::Function {
            ty: 100,
            text: "{x+y}".into()
        }
    );
    // The same lambda defined in context .d
    let k = decode_whole(&hex("0100000016000000 64 6400 0a 00 05000000 7b782b797d"));
    assert!(
        matches!(k, K::Function { ty: 100, ref text } if text.contains("{x+y}") && text.contains(".d"))
    );
}

#[test]
fn errors_and_the_generic_null_round_trip() {
    for k in [K::Error("type".into()), K::Null] {
        let m = encode_message(MsgType::Response, &k, false).unwrap();
        assert_eq!(decode_whole(&m), k);
    }
    assert_eq!(
        encode_message(MsgType::Response, &K::Error("type".into()), false).unwrap(),
        hex("010200000e000000 80 7479706500")
    );
}
