//! Issue 27: the folders of `src/` depend on each other in one direction, so a newcomer can read
//! them bottom up: `types` and `collections` use no other folder; `raw` and `streams` only
//! `types`; `allocators` (the `Allocator` trait, the plain allocator, the pool's simulation)
//! those; `arena` and `trace` build on `allocators`; `devices` (the factory, the backends,
//! PyTorch's devices) on all of them. Test code (`#[cfg(test)]` modules) may use anything; the
//! shadow model and the fuzz targets' bodies are a crate of their own (`crates/arena-model`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const FOLDERS: [&str; 8] = [
    "types",
    "collections",
    "raw",
    "streams",
    "allocators",
    "arena",
    "trace",
    "devices",
];

/// What each folder may use, besides itself.
fn allowed(folder: &str) -> &'static [&'static str] {
    match folder {
        "types" | "collections" => &[],
        "raw" | "streams" => &["types"],
        "allocators" => &["types", "collections", "raw", "streams"],
        "arena" => &["types", "collections", "raw", "streams", "allocators"],
        "trace" => &["types", "collections", "raw", "streams", "allocators"],
        _ => &FOLDERS,
    }
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `(folder used, line)` for each `crate::<folder>` in the non-test code of `file`.
fn uses(file: &Path) -> Vec<(String, usize)> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        for f in FOLDERS {
            let needle = format!("crate::{f}");
            if let Some(i) = line.find(&needle) {
                let after = line[i + needle.len()..].chars().next();
                if !after.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    out.push((f.to_string(), n + 1));
                }
            }
        }
    }
    out
}

#[test]
fn each_folder_uses_only_the_folders_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut wrong = BTreeSet::new();
    for folder in FOLDERS {
        let mut files = Vec::new();
        sources(&src.join(folder), &mut files);
        let root_file = src.join(format!("{folder}.rs"));
        if root_file.exists() {
            files.push(root_file);
        }
        for file in files {
            for (used, line) in uses(&file) {
                if used != folder && !allowed(folder).contains(&used.as_str()) {
                    let at = file
                        .strip_prefix(&src)
                        .unwrap_or(&file)
                        .display()
                        .to_string();
                    wrong.insert(format!("{at}:{line}: {folder} uses {used}"));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "folders used against the direction:\n{}",
        wrong.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn every_folder_of_src_is_placed_in_the_order() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found: Vec<String> = std::fs::read_dir(&src)
        .expect("src")
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    found.sort();
    let mut placed: Vec<String> = FOLDERS.iter().map(|s| s.to_string()).collect();
    placed.sort();
    assert_eq!(found, placed, "a new folder needs its place in FOLDERS");
}
