//! Keeps `docs/FORMAT.md` in step with the code: the document's worked example (parameters,
//! hex dump, decoded-field table and derived values) is parsed and recomputed with
//! `faultline::format::Format`.
//!
//! The example lives in blocks that follow HTML comment marker lines:
//!
//! - `<!-- worked-example:parameters -->`: a fenced block of `name = value` lines (the SectorId
//!   and the sector size);
//! - `<!-- worked-example:dump -->`: a fenced block holding `xxd` output of bytes 0..64;
//! - `<!-- worked-example:fields -->`: a Markdown table `| bytes | hex | field | value | ... |`;
//! - `<!-- worked-example:derived -->`: a fenced block of `name = value` lines (checksum key,
//!   full keyed hash, payload seed and first payload words).
//!
//! When the code changes on purpose, print the blocks as the code now produces them with
//! `FORMAT_DOC_RENDER=1 cargo test -p faultline --test integration format_doc:: -- --nocapture`.

use faultline::format::{read_header, Decoded, Format, SectorId, HEADER_BYTES};
use faultline::rng::{hash_words, WyRand};
use std::collections::HashMap;

const CHECKSUM_CONTEXT: &str = "faultline sector v1 checksum key";

fn doc() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/FORMAT.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// Index of the line that is exactly `marker` (after trimming); exactly one must exist.
fn marker_line(lines: &[&str], marker: &str) -> usize {
    let hits: Vec<usize> = lines.iter().enumerate().filter(|(_, l)| l.trim() == marker).map(|(i, _)| i).collect();
    assert_eq!(hits.len(), 1, "FORMAT.md must contain the marker line {marker:?} exactly once (found {})", hits.len());
    hits[0]
}

/// The contents of the first fenced block after `marker`.
fn fenced_after<'a>(lines: &[&'a str], marker: &str) -> Vec<&'a str> {
    let at = marker_line(lines, marker);
    let open = (at + 1..lines.len())
        .find(|&i| lines[i].trim_start().starts_with("```"))
        .unwrap_or_else(|| panic!("no fenced block after {marker:?}"));
    let close = (open + 1..lines.len())
        .find(|&i| lines[i].trim_start().starts_with("```"))
        .unwrap_or_else(|| panic!("fenced block after {marker:?} is not closed"));
    lines[open + 1..close].to_vec()
}

/// The body rows of the first Markdown table after `marker`, cells trimmed.
fn table_after(lines: &[&str], marker: &str) -> Vec<Vec<String>> {
    let at = marker_line(lines, marker);
    let start =
        (at + 1..lines.len()).find(|&i| lines[i].trim_start().starts_with('|')).unwrap_or_else(|| panic!("no table after {marker:?}"));
    let rows: Vec<Vec<String>> = lines[start..]
        .iter()
        .take_while(|l| l.trim_start().starts_with('|'))
        .map(|l| l.trim().trim_matches('|').split('|').map(|c| c.trim().to_string()).collect())
        .collect();
    assert!(rows.len() > 2, "table after {marker:?} has no body rows");
    // Skip the header row and the `|---|` separator.
    rows[2..].to_vec()
}

/// `name = value` lines; the value is the first whitespace-separated token after `=`.
fn key_values(block: &[&str]) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for line in block {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let (k, v) = line.split_once('=').unwrap_or_else(|| panic!("expected `name = value`, got {line:?}"));
        let v = v.split_whitespace().next().unwrap_or_else(|| panic!("no value in {line:?}"));
        assert!(out.insert(k.trim().to_string(), v.to_string()).is_none(), "{:?} given twice", k.trim());
    }
    out
}

fn strip(s: &str) -> &str {
    s.trim().trim_matches('`')
}

/// Decimal or `0x` hexadecimal, `_` separators allowed.
fn parse_u64(s: &str) -> u64 {
    let s = strip(s).replace('_', "");
    let r = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.unwrap_or_else(|e| panic!("{s:?} is not a number: {e}"))
}

/// Hex digits, whitespace ignored.
fn parse_hex(s: &str) -> Vec<u8> {
    let digits: String = strip(s).chars().filter(|c| !c.is_whitespace()).collect();
    assert!(digits.len().is_multiple_of(2), "odd number of hex digits in {s:?}");
    (0..digits.len()).step_by(2).map(|i| u8::from_str_radix(&digits[i..i + 2], 16).unwrap_or_else(|e| panic!("{s:?}: {e}"))).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn spaced_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" ")
}

/// `xxd` default output (16 bytes a line, 2-byte groups, ASCII column).
fn xxd(bytes: &[u8], base: usize) -> String {
    let mut out = String::new();
    for (n, line) in bytes.chunks(16).enumerate() {
        let mut groups = String::new();
        for (g, pair) in line.chunks(2).enumerate() {
            if g > 0 {
                groups.push(' ');
            }
            groups.push_str(&hex(pair));
        }
        let ascii: String = line.iter().map(|&b| if (0x20..0x7f).contains(&b) { b as char } else { '.' }).collect();
        out.push_str(&format!("{:08x}: {groups:<39}  {ascii}\n", base + n * 16));
    }
    out
}

/// Parses `xxd` output back into bytes, checking the offsets and the ASCII column.
fn parse_xxd(block: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for line in block.iter().filter(|l| !l.trim().is_empty()) {
        let (off, rest) = line.split_once(": ").unwrap_or_else(|| panic!("not an xxd line: {line:?}"));
        assert_eq!(
            usize::from_str_radix(off.trim(), 16).unwrap_or_else(|e| panic!("offset in {line:?}: {e}")),
            out.len(),
            "offset of dump line {line:?}"
        );
        // Fixed columns, as xxd prints them: 39 characters of hex groups, two spaces, ASCII.
        assert!(rest.is_ascii() && rest.len() > 41, "not an xxd line: {line:?}");
        let (groups, ascii) = (&rest[..39], &rest[41..]);
        let bytes = parse_hex(groups);
        assert!(!bytes.is_empty() && bytes.len() <= 16, "dump line {line:?} holds {} bytes", bytes.len());
        let want: String = bytes.iter().map(|&b| if (0x20..0x7f).contains(&b) { b as char } else { '.' }).collect();
        assert_eq!(ascii, want, "ASCII column of dump line {line:?}");
        out.extend_from_slice(&bytes);
    }
    out
}

struct Example {
    sector_bytes: usize,
    id: SectorId,
}

fn parameters(lines: &[&str]) -> Example {
    let kv = key_values(&fenced_after(lines, "<!-- worked-example:parameters -->"));
    let get = |k: &str| parse_u64(kv.get(k).unwrap_or_else(|| panic!("parameter {k} missing from the worked example")));
    let narrow = |k: &str, max: u64| {
        let v = get(k);
        assert!(v <= max, "parameter {k} = {v} does not fit its field");
        v
    };
    let expected: [&str; 9] = ["sector_bytes", "run_id", "addr", "write_id", "cycle", "port", "flags", "index", "count"];
    for k in kv.keys() {
        assert!(expected.contains(&k.as_str()), "unknown parameter {k} in the worked example");
    }
    Example {
        sector_bytes: get("sector_bytes") as usize,
        id: SectorId {
            run_id: get("run_id"),
            addr: get("addr"),
            write_id: get("write_id"),
            cycle: narrow("cycle", u32::MAX as u64) as u32,
            port: narrow("port", u8::MAX as u64) as u8,
            flags: narrow("flags", u8::MAX as u64) as u8,
            index: narrow("index", u32::MAX as u64) as u32,
            count: narrow("count", u32::MAX as u64) as u32,
        },
    }
}

fn encode(ex: &Example) -> Vec<u8> {
    let f = Format::new(ex.id.run_id, ex.sector_bytes);
    let mut s = vec![0u8; ex.sector_bytes];
    f.encode(&ex.id, &mut s);
    s
}

fn payload_seed(id: &SectorId) -> u64 {
    hash_words(&[
        id.run_id,
        id.addr,
        id.write_id,
        (id.cycle as u64) << 32 | (id.port as u64) << 8 | id.flags as u64,
        (id.index as u64) << 32 | id.count as u64,
    ])
}

fn checksum_key(run_id: u64) -> [u8; 32] {
    blake3::derive_key(CHECKSUM_CONTEXT, &run_id.to_le_bytes())
}

/// The keyed BLAKE3 hash the checksum is cut from: over the identity bytes 0..48 only (the
/// payload is verified by regeneration instead).
fn keyed_hash(run_id: u64, sector: &[u8]) -> [u8; 32] {
    *blake3::keyed_hash(&checksum_key(run_id), &sector[..48]).as_bytes()
}

/// (offset range, field name, value as written in the document) of each header field.
fn field_rows(s: &[u8]) -> Vec<(usize, usize, &'static str, String)> {
    let id = read_header(s);
    vec![
        (0, 8, "magic", format!("`{}`", String::from_utf8_lossy(&s[0..8]))),
        (8, 10, "version", u16::from_le_bytes([s[8], s[9]]).to_string()),
        (10, 11, "port", id.port.to_string()),
        (11, 12, "flags", format!("0x{:02x}", id.flags)),
        (12, 16, "cycle", id.cycle.to_string()),
        (16, 24, "run_id", format!("0x{:016x}", id.run_id)),
        (24, 32, "addr", format!("0x{:x}", id.addr)),
        (32, 40, "write_id", id.write_id.to_string()),
        (40, 44, "index", id.index.to_string()),
        (44, 48, "count", id.count.to_string()),
        (48, 64, "checksum", format!("`{}`", hex(&s[48..64]))),
    ]
}

/// The example's blocks as the code produces them (to paste into FORMAT.md after a change).
fn render(ex: &Example) -> String {
    let s = encode(ex);
    let id = &ex.id;
    let mut out = String::new();
    out.push_str("<!-- worked-example:parameters -->\n```text\n");
    out.push_str(&format!(
        "sector_bytes = {}\nrun_id       = 0x{:016x}\naddr         = 0x{:x}\nwrite_id     = {}\ncycle        = {}\nport         = {}\nflags        = 0x{:02x}\nindex        = {}\ncount        = {}\n```\n\n",
        ex.sector_bytes, id.run_id, id.addr, id.write_id, id.cycle, id.port, id.flags, id.index, id.count
    ));
    out.push_str("<!-- worked-example:dump -->\n```text\n");
    out.push_str(&xxd(&s[..HEADER_BYTES], 0));
    out.push_str("```\n\n<!-- worked-example:fields -->\n| bytes | hex (as stored) | field | value |\n|---|---|---|---|\n");
    for (a, b, name, value) in field_rows(&s) {
        out.push_str(&format!("| {a}..{b} | `{}` | {name} | {value} |\n", spaced_hex(&s[a..b])));
    }
    let w0 = u64::from_le_bytes(s[64..72].try_into().unwrap());
    let w1 = u64::from_le_bytes(s[72..80].try_into().unwrap());
    out.push_str("\n<!-- worked-example:derived -->\n```text\n");
    out.push_str(&format!(
        "key     = {}\nhash    = {}\nseed    = 0x{:016x}\nword[0] = 0x{w0:016x}\nword[1] = 0x{w1:016x}\n```\n",
        hex(&checksum_key(id.run_id)),
        hex(&keyed_hash(id.run_id, &s)),
        payload_seed(id)
    ));
    out
}

const HINT: &str = "docs/FORMAT.md and the sector format disagree; if the format changed on purpose, print the example as the code now produces it with FORMAT_DOC_RENDER=1 cargo test -p faultline --test integration format_doc:: -- --nocapture";

#[test]
fn worked_example_matches_the_code() {
    let text = doc();
    let lines: Vec<&str> = text.lines().collect();
    let ex = parameters(&lines);
    if std::env::var_os("FORMAT_DOC_RENDER").is_some() {
        println!("{}", render(&ex));
    }
    let sector = encode(&ex);

    // The dump: exactly the header, byte for byte.
    let dump = parse_xxd(&fenced_after(&lines, "<!-- worked-example:dump -->"));
    assert_eq!(dump.len(), HEADER_BYTES, "the worked example dumps the {HEADER_BYTES}-byte header");
    assert_eq!(hex(&dump), hex(&sector[..HEADER_BYTES]), "{HINT}");
    assert_eq!(read_header(&dump), ex.id, "{HINT}");
    assert_eq!(Format::new(ex.id.run_id, ex.sector_bytes).decode(&sector), Decoded::Valid(ex.id));

    // The decoded-field table: every field once, bytes and values as the code has them.
    let rows = table_after(&lines, "<!-- worked-example:fields -->");
    let want = field_rows(&sector);
    assert_eq!(rows.len(), want.len(), "the field table has {} rows, the header has {} fields", rows.len(), want.len());
    for (row, (a, b, name, value)) in rows.iter().zip(&want) {
        assert!(row.len() >= 4, "field table row {row:?} has fewer than 4 cells");
        assert_eq!(strip(&row[0]), format!("{a}..{b}"), "byte range of field {name}: {HINT}");
        assert_eq!(strip(&row[2]), *name, "field at bytes {a}..{b}: {HINT}");
        assert_eq!(parse_hex(&row[1]), &sector[*a..*b], "stored bytes of field {name}: {HINT}");
        let stated = row[3].split_whitespace().next().unwrap_or("");
        match *name {
            "magic" | "checksum" => {
                assert_eq!(strip(stated), strip(value), "value of {name}: {HINT}")
            }
            _ => assert_eq!(parse_u64(stated), parse_u64(value), "value of {name}: {HINT}"),
        }
    }

    // Derived values: checksum key and hash, payload seed and first words.
    let kv = key_values(&fenced_after(&lines, "<!-- worked-example:derived -->"));
    let get = |k: &str| kv.get(k).unwrap_or_else(|| panic!("derived value {k} missing from the worked example")).as_str();
    let key = checksum_key(ex.id.run_id);
    let hash = keyed_hash(ex.id.run_id, &sector);
    assert_eq!(parse_hex(get("key")), key, "checksum key: {HINT}");
    assert_eq!(parse_hex(get("hash")), hash, "keyed hash: {HINT}");
    assert_eq!(&hash[..16], &sector[48..64], "the stored checksum is the first 16 bytes of the keyed hash");
    let seed = parse_u64(get("seed"));
    assert_eq!(seed, payload_seed(&ex.id), "payload seed: {HINT}");
    let mut rng = WyRand::new(seed);
    for (i, k) in ["word[0]", "word[1]"].iter().enumerate() {
        let stated = parse_u64(get(k));
        let stored = u64::from_le_bytes(sector[HEADER_BYTES + 8 * i..HEADER_BYTES + 8 * i + 8].try_into().unwrap());
        assert_eq!(stated, stored, "payload {k} (bytes {}..{}): {HINT}", HEADER_BYTES + 8 * i, HEADER_BYTES + 8 * i + 8);
        assert_eq!(rng.next_u64(), stored, "payload {k} is not wyrand output {i} of the seed");
    }
}

/// The document's own `xxd` reproduction is what `xxd` prints (checked when xxd is installed).
#[test]
fn dump_layout_is_xxd_layout() {
    let text = doc();
    let lines: Vec<&str> = text.lines().collect();
    let ex = parameters(&lines);
    let sector = encode(&ex);
    let path = std::env::temp_dir().join(format!("faultline-format-doc-{}", std::process::id()));
    std::fs::write(&path, &sector).unwrap();
    let out = std::process::Command::new("xxd").args(["-l", "64"]).arg(&path).output();
    let _ = std::fs::remove_file(&path);
    match out {
        Ok(o) if o.status.success() => assert_eq!(String::from_utf8_lossy(&o.stdout), xxd(&sector[..HEADER_BYTES], 0)),
        _ => eprintln!("xxd not available; skipping the comparison with its output"),
    }
}
