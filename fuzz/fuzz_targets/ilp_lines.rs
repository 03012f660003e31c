//! InfluxDB line protocol: any bytes as one request body (`push_buffer`,
//! what HTTP and TCP feed the parser) and line by line (`push_line`).
//! Asserts: no panic; what was consumed ends at a newline; feeding the same
//! bytes in two pieces (as TCP reads deliver them) gives the same rows, the
//! same consumed count and an error on the same line as feeding them at once; the
//! batches fit the schema: they encode, decode against the schema, and
//! encode again to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickdb_core::codec;
use tickdb_fuzz::schema;
use tickdb_ilp::{IlpBatcher, IlpOptions, Precision, LINE_BYTES_MAX};

fn opts(precision: Precision) -> IlpOptions {
    IlpOptions {
        precision,
        now_ns: 1_700_000_000_000_000_000,
        line_bytes_max: LINE_BYTES_MAX,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, data)) = data.split_first() else {
        return;
    };
    let precision = match sel & 3 {
        0 => Precision::Nanos,
        1 => Precision::Micros,
        2 => Precision::Millis,
        _ => Precision::Seconds,
    };
    let s = schema();

    // The whole body at once.
    let mut whole = IlpBatcher::new(s, opts(precision));
    let (pos, lines, err) = whole.push_buffer(data, 1);
    // Errors are compared by line: the reason may quote up to 32 bytes
    // past the bad spot, which can reach into the next line.
    let err_line = err.as_ref().map(|e| e.line());
    assert!(pos <= data.len());
    assert!(
        pos == 0 || data[pos - 1] == b'\n',
        "consumed up to a newline"
    );
    assert!(
        lines as usize <= pos,
        "every consumed line ends with its newline"
    );
    if let Some(e) = &err {
        assert_eq!(
            e.line(),
            1 + lines,
            "the error names the first line not consumed"
        );
    }
    let rows = whole.rows();
    let batches = whole.finish();
    let enc = codec::encode_to_vec(&batches);
    let back = codec::decode(&enc, Some(s)).expect("ILP batches decode against their schema");
    assert_eq!(codec::encode_to_vec(&back), enc);
    assert_eq!(batches.iter().map(|b| b.rows).sum::<usize>(), rows);

    // The same bytes in two pieces, split where the selector byte says.
    let split = (sel as usize >> 2) * data.len() / 64;
    let mut two = IlpBatcher::new(s, opts(precision));
    let (p1, l1, e1) = two.push_buffer(&data[..split], 1);
    match e1 {
        Some(e1) => {
            assert_eq!((p1, l1, Some(e1.line())), (pos, lines, err_line));
            assert_eq!(two.rows(), rows);
        }
        None => {
            let (p2, l2, e2) = two.push_buffer(&data[p1..], 1 + l1);
            let e2 = e2.map(|e| e.line());
            assert_eq!((p1 + p2, l1 + l2, e2), (pos, lines, err_line));
            assert_eq!(two.rows(), rows);
            assert_eq!(codec::encode_to_vec(&two.finish()), enc);
        }
    }

    // Line by line, as a caller that splits lines itself does: no panic.
    let mut by_line = IlpBatcher::new(s, opts(precision));
    for (i, line) in data.split(|&b| b == b'\n').enumerate() {
        let _ = by_line.push_line(line, i as u64 + 1);
    }
    let _ = by_line.finish();
});
