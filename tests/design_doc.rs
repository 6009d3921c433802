//! `docs/design.md`'s module table ("### Modules") matches `src/`: every file or folder it
//! names exists, and every source file is named, or lies in a folder that is (unit tests
//! in `tests.rs` files and `tests/` folders go with their module).

use std::collections::BTreeSet;
use std::path::Path;

/// The paths in the first column of the module table, relative to `src/` (folders end in
/// `/`).
fn named_in_design() -> BTreeSet<String> {
    let design = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/design.md"))
        .expect("docs/design.md");
    let table = design
        .split("### Modules")
        .nth(1)
        .expect("design.md has a \"### Modules\" section");
    let mut named = BTreeSet::new();
    for line in table.lines().skip_while(|l| !l.starts_with('|')) {
        if !line.starts_with('|') {
            break;
        }
        let first = line.split('|').nth(1).unwrap_or_default();
        for (k, part) in first.split('`').enumerate() {
            if k % 2 == 1 {
                named.insert(part.to_string());
            }
        }
    }
    named
}

/// Every `.rs` file under `src/`, relative to it, except unit-test files.
fn source_files(dir: &Path, root: &Path, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).expect("readable src/") {
        let path = entry.expect("directory entry").path();
        let rel = path.strip_prefix(root).expect("under src/");
        let rel = rel.to_string_lossy().replace('\\', "/");
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "tests") {
                continue;
            }
            source_files(&path, root, out);
        } else if rel.ends_with(".rs") && !rel.ends_with("/tests.rs") {
            out.insert(rel);
        }
    }
}

#[test]
fn the_module_table_of_design_md_matches_src() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let named = named_in_design();
    assert!(
        named.len() > 20,
        "the module table was not found: {named:?}"
    );
    let missing: Vec<_> = named.iter().filter(|n| !src.join(n).exists()).collect();
    assert!(
        missing.is_empty(),
        "docs/design.md names files that src/ does not have: {missing:?}"
    );
    let mut files = BTreeSet::new();
    source_files(&src, &src, &mut files);
    let unnamed: Vec<_> = files
        .iter()
        .filter(|f| {
            !named
                .iter()
                .any(|n| *f == n || (n.ends_with('/') && f.starts_with(n.as_str())))
        })
        .collect();
    assert!(
        unnamed.is_empty(),
        "src/ has files that docs/design.md's module table does not name: {unnamed:?}"
    );
}
