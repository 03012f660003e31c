//! Loading a schema file (`--schema FILE`): only regular files, a bounded
//! read, and errors that name the file, line and column and the kind of
//! problem but never repeat what the file holds (a mistyped path pointing at
//! a secret must not print the secret).

use std::time::{Duration, Instant};
use tickdb_core::schema::{Schema, SCHEMA_FILE_BYTES_MAX};

const SECRET: &str = "hunter2SECRET";

fn load_err(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("schema.toml");
    std::fs::write(&path, text).unwrap();
    let e = Schema::load(&path).expect_err("must fail").to_string();
    assert!(
        e.contains(&path.display().to_string()),
        "error must name the file: {e}"
    );
    assert!(!e.contains(SECRET), "error echoes the file's contents: {e}");
    e
}

#[test]
fn a_shadow_like_file_is_refused_without_echoing_it() {
    let e = load_err(&format!("root:$6${SECRET}$abc:19000:0:99999:7:::\n"));
    assert!(e.contains("line 1, column"), "{e}");
}

#[test]
fn structural_errors_do_not_echo_values_or_keys() {
    // A value of the wrong type: serde would quote it.
    let e = load_err(&format!("table = \"{SECRET}\"\n"));
    assert!(e.contains("line 1, column"), "{e}");
    // An unknown key: serde would name it.
    let e = load_err(&format!(
        "[[table]]\nname = \"t\"\n{SECRET} = 1\ncolumn = [{{ name = \"time\", type = \"timestamp\" }}]\n"
    ));
    assert!(e.contains("line 3, column 1"), "{e}");
    assert!(e.contains("unknown key"), "{e}");
    // A bad value of a known key: an unknown column type.
    let e = load_err(&format!(
        "[[table]]\nname = \"t\"\ncolumn = [{{ name = \"time\", type = \"{SECRET}\" }}]\n"
    ));
    assert!(e.contains("line 3, column"), "{e}");
    assert!(e.contains("unknown column type"), "{e}");
    // A bad table name.
    let e = load_err(&format!(
        "[[table]]\nname = \"{SECRET}!\"\ncolumn = [{{ name = \"time\", type = \"timestamp\" }}]\n"
    ));
    assert!(e.contains("line 2, column 8"), "{e}");
}

#[test]
fn not_utf8_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bin.toml");
    std::fs::write(&path, [0x5b, 0xff, 0xfe, 0x00]).unwrap();
    let e = Schema::load(&path).err().unwrap().to_string();
    assert!(e.contains("UTF-8"), "{e}");
}

#[test]
fn only_regular_files_are_read() {
    let t = Instant::now();
    let e = Schema::load(std::path::Path::new("/dev/zero"))
        .expect_err("/dev/zero is not a schema")
        .to_string();
    assert!(e.contains("not a regular file"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let e = Schema::load(dir.path()).err().unwrap().to_string();
    assert!(e.contains("not a regular file"), "{e}");
    // A FIFO nobody writes to would block a plain open() forever.
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc_mkfifo(c.as_ptr(), 0o600) }, 0);
    let e = Schema::load(&fifo).err().unwrap().to_string();
    assert!(e.contains("not a regular file"), "{e}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
}

extern "C" {
    #[link_name = "mkfifo"]
    fn libc_mkfifo(path: *const std::ffi::c_char, mode: u32) -> i32;
}

#[test]
fn the_read_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.toml");
    let mut text = tickdb_core::schema::DEFAULT_SCHEMA_TOML.to_string();
    while text.len() <= SCHEMA_FILE_BYTES_MAX {
        text.push_str("# padding padding padding padding padding padding padding\n");
    }
    std::fs::write(&path, &text).unwrap();
    let e = Schema::load(&path).err().unwrap().to_string();
    assert!(e.contains("larger than"), "{e}");
    assert!(e.contains(&SCHEMA_FILE_BYTES_MAX.to_string()), "{e}");
}

#[test]
fn a_good_file_loads_with_its_text() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.toml");
    std::fs::write(&path, tickdb_core::schema::DEFAULT_SCHEMA_TOML).unwrap();
    let (schema, text) = Schema::load(&path).unwrap();
    assert_eq!(text, tickdb_core::schema::DEFAULT_SCHEMA_TOML);
    assert!(schema.table("trade").is_some());
}
