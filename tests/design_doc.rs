//! `docs/design.md` matches `src/`: every file or folder its module table ("### Modules")
//! names exists, and every source file is named, or lies in a folder that is (unit tests
//! in `tests.rs` files and `tests/` folders go with their module); and its module graph
//! ("### Module graph") places every module, each above every module it uses.

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

/// `docs/design.md`'s module graph ("### Module graph"): each line's level and modules.
fn graph_in_design() -> Vec<(usize, Vec<String>)> {
    let design = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/design.md"))
        .expect("docs/design.md");
    let section = design
        .split("### Module graph")
        .nth(1)
        .expect("design.md has a \"### Module graph\" section");
    let block = section
        .split("```text")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the graph is a ```text block");
    block
        .lines()
        .filter_map(|line| {
            let (level, rest) = line.trim().split_once(char::is_whitespace)?;
            let level: usize = level.parse().ok()?;
            // The modules, a comma-separated list, then (after two spaces) what they are.
            let names = rest.trim().split("  ").next().unwrap_or_default();
            let modules = names.split(',').map(|m| m.trim().to_string()).collect();
            Some((level, modules))
        })
        .collect()
}

/// The module a source file belongs to in the graph: its first path component under
/// `src/` (the Redis transport, `replication/redis/`, on its own).
fn module_of(rel: &str) -> String {
    if rel.starts_with("replication/redis") {
        return "replication/redis".into();
    }
    let first = rel.split('/').next().unwrap_or_default();
    first.trim_end_matches(".rs").to_string()
}

/// The first path segments after each `crate::` in `code`, including every item of a
/// `crate::{..}` group.
fn crate_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let head = item.trim().split("::").next().unwrap_or_default();
                if !head.is_empty() {
                    out.push(head.to_string());
                }
            }
        } else {
            let head: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.push(head);
        }
    }
    out
}

/// Names the crate root re-exports, and the module each comes from (`pub use m::{..}`).
fn reexports(lib: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = lib;
    while let Some(at) = rest.find("\npub use ") {
        rest = &rest[at + "\npub use ".len()..];
        let end = rest.find(';').unwrap_or(rest.len());
        let (module, names) = rest[..end].split_once("::").unwrap_or_default();
        for name in names.trim_matches(|c| c == '{' || c == '}').split(',') {
            out.push((name.trim().to_string(), module.trim().to_string()));
        }
    }
    out
}

#[test]
fn the_module_graph_of_design_md_is_the_one_src_has() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = graph_in_design();
    let level_of = |m: &str| {
        graph
            .iter()
            .find(|(_, ms)| ms.iter().any(|x| x == m))
            .map(|g| g.0)
    };
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("src/lib.rs");
    let reexported = reexports(&lib);
    let mut files = BTreeSet::new();
    source_files(&src, &src, &mut files);
    let mut modules = BTreeSet::new();
    let mut upward = Vec::new();
    for rel in &files {
        if rel == "lib.rs" || rel.starts_with("loom_models/") {
            continue;
        }
        let module = module_of(rel);
        let text = std::fs::read_to_string(src.join(rel)).expect("a source file");
        let code = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default();
        let code: String = code
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let Some(level) = level_of(&module) else {
            modules.insert(module);
            continue;
        };
        modules.insert(module.clone());
        for head in crate_paths(&code) {
            let used = reexported
                .iter()
                .find(|(name, _)| *name == head)
                .map_or(head.clone(), |(_, m)| m.clone());
            // The transport's parent module, the rest of `replication`, sits below it.
            if used == module || (module == "replication/redis" && used == "replication") {
                continue;
            }
            match level_of(&used) {
                Some(l) if l < level => {}
                Some(l) => upward.push(format!("{rel} ({level}) uses {used} ({l})")),
                None => {} // not a module of ours (WorkerId, a std path)
            }
        }
    }
    let ungraphed: Vec<_> = modules.iter().filter(|m| level_of(m).is_none()).collect();
    assert!(
        ungraphed.is_empty(),
        "modules missing from design.md's module graph: {ungraphed:?}"
    );
    assert!(
        upward.is_empty(),
        "uses that go sideways or up in design.md's module graph: {upward:#?}"
    );
    assert!(graph.len() >= 8, "the graph was not found: {graph:?}");
}
