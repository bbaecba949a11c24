//! Comments cite "decision N" (the design document's numbered decisions) and "issue N" (the
//! issue tracker); neither lives in this repository, so `docs/decisions.md` explains each
//! number under a heading `### Decision N: …` or `### Issue N: …`. These tests read every
//! text file of the source folders and fail when a cited number has no heading there, or
//! when the headings are out of order.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// A citation: `("decision", 7)` or `("issue", 13)`.
type Citation = (&'static str, u32);

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The folders read, relative to the workspace root: `crates/*/{src,tests,benches,examples}`,
/// `bindings/*/{src,tests}`, `ts`, `scripts`, `__test__` and `benches`.
fn source_folders(root: &Path) -> Vec<PathBuf> {
    let mut folders = Vec::new();
    let nested: [(&str, &[&str]); 2] = [
        ("crates", &["src", "tests", "benches", "examples"]),
        ("bindings", &["src", "tests"]),
    ];
    for (parent, subfolders) in nested {
        for package in sorted_entries(&root.join(parent)) {
            for sub in subfolders {
                folders.push(package.join(sub));
            }
        }
    }
    for top in ["ts", "scripts", "__test__", "benches"] {
        folders.push(root.join(top));
    }
    folders.retain(|f| f.is_dir());
    folders
}

fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    entries
}

/// Every file under `dir`, skipping `target/`, `node_modules/` and symbolic links.
fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for path in sorted_entries(dir) {
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if meta.is_dir() && name != "target" && name != "node_modules" {
            files_under(&path, out);
        } else if meta.is_file() {
            out.push(path);
        }
    }
}

/// The file as text, or `None` for a binary or non-UTF-8 file.
fn text_of(path: &Path) -> Option<String> {
    let bytes = fs::read(path).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    (!text.contains('\0')).then_some(text)
}

/// Drops leading spaces and comment markers, for a citation whose number is wrapped onto the
/// next line of a comment (`(decision` / `/// 7).`).
fn after_comment_marker(line: &str) -> &str {
    let mut rest = line.trim_start();
    for marker in ["//!", "///", "//", "/*", "#", "*"] {
        if let Some(r) = rest.strip_prefix(marker) {
            rest = r;
            break;
        }
    }
    rest.trim_start()
}

/// The number at the start of `text`, and what follows it.
fn leading_number(text: &str) -> Option<(u32, &str)> {
    let digits = text.len() - text.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let n = text[..digits].parse().ok()?;
    Some((n, &text[digits..]))
}

/// The next number of a list (", N", " and N", ", and N"), and what follows it.
fn next_in_list(text: &str) -> Option<(u32, &str)> {
    let tail = text
        .strip_prefix(", and ")
        .or_else(|| text.strip_prefix(", "))
        .or_else(|| text.strip_prefix(" and "))?;
    leading_number(tail)
}

/// The citations in one line: "decision N" and "issue N" in any case, and lists after the
/// plural ("decisions N and M"). `next` is the following line, where a number may have wrapped.
fn citations_in(line: &str, next: Option<&str>) -> Vec<Citation> {
    let lower = line.to_ascii_lowercase();
    let mut found = Vec::new();
    for kind in ["decision", "issue"] {
        for (at, _) in lower.match_indices(kind) {
            let word_start = lower[..at]
                .chars()
                .next_back()
                .is_none_or(|c| !c.is_ascii_alphanumeric() && c != '_');
            if !word_start {
                continue;
            }
            let after = &lower[at + kind.len()..];
            let (plural, after) = match after.strip_prefix('s') {
                Some(rest) => (true, rest),
                None => (false, after),
            };
            let rest = after.trim_start_matches([' ', '\t']);
            if rest.len() == after.len() && !rest.is_empty() {
                continue; // not a word of its own: "issued", "decision-making"
            }
            let numbers = if rest.trim().is_empty() {
                next.map(after_comment_marker)
            } else {
                Some(rest)
            };
            let Some((n, mut rest)) = numbers.and_then(leading_number) else {
                continue;
            };
            found.push((kind, n));
            if plural {
                while let Some((n, r)) = next_in_list(rest) {
                    found.push((kind, n));
                    rest = r;
                }
            }
        }
    }
    found
}

/// Every citation in the source folders, with the first `path:line` that makes it.
fn cited(root: &Path) -> BTreeMap<Citation, String> {
    let mut files = Vec::new();
    for folder in source_folders(root) {
        files_under(&folder, &mut files);
    }
    let mut first = BTreeMap::new();
    for path in files {
        let Some(text) = text_of(&path) else { continue };
        let shown = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .display()
            .to_string();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            for citation in citations_in(line, lines.get(i + 1).copied()) {
                first
                    .entry(citation)
                    .or_insert_with(|| format!("{shown}:{}", i + 1));
            }
        }
    }
    first
}

/// A `### Decision N…` or `### Issue N…` heading of docs/decisions.md, where it is, and the
/// `## ` part it is in.
#[derive(Debug)]
struct Heading {
    citation: Citation,
    line: usize,
    part: String,
}

fn headings(doc: &str) -> Vec<Heading> {
    let mut part = String::new();
    let mut found = Vec::new();
    for (i, line) in doc.lines().enumerate() {
        if let Some(title) = line.strip_prefix("## ") {
            part = title.trim().to_string();
            continue;
        }
        for (kind, prefix) in [("decision", "### Decision "), ("issue", "### Issue ")] {
            let number = line.strip_prefix(prefix).and_then(leading_number);
            if let Some((n, rest)) = number {
                if !rest.starts_with(|c: char| c.is_ascii_alphanumeric()) {
                    found.push(Heading {
                        citation: (kind, n),
                        line: i + 1,
                        part: part.clone(),
                    });
                }
            }
        }
    }
    found
}

fn decisions_doc(root: &Path) -> String {
    let path = root.join("docs/decisions.md");
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_decision_and_issue_a_comment_cites_is_explained_in_docs_decisions() {
    let root = root();
    let cited = cited(&root);
    assert!(
        cited.keys().any(|(k, _)| *k == "decision") && cited.keys().any(|(k, _)| *k == "issue"),
        "no citations found under {}: are the source folders where this test looks?",
        root.display()
    );
    let explained: Vec<Citation> = headings(&decisions_doc(&root))
        .into_iter()
        .map(|h| h.citation)
        .collect();
    let missing: Vec<String> = cited
        .iter()
        .filter(|(citation, _)| !explained.contains(citation))
        .map(|((kind, n), at)| format!("  {kind} {n}, cited at {at}"))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/decisions.md has no `### Decision N: …` / `### Issue N: …` section for:\n{}\n\
         Add one saying what was decided or asked, why, and where its tests and measurements are.",
        missing.join("\n")
    );
}

#[test]
fn the_headings_of_docs_decisions_ascend_within_each_part() {
    let all = headings(&decisions_doc(&root()));
    assert!(
        all.iter().any(|h| h.citation.0 == "decision")
            && all.iter().any(|h| h.citation.0 == "issue"),
        "docs/decisions.md has no decision or no issue headings: {all:?}"
    );
    let out_of_order: Vec<String> = all
        .windows(2)
        .filter(|w| w[0].part == w[1].part && w[0].citation >= w[1].citation)
        .map(|w| {
            let ((k0, n0), (k1, n1)) = (w[0].citation, w[1].citation);
            format!(
                "  in \"## {}\": {k0} {n0} (line {}) comes before {k1} {n1} (line {})",
                w[1].part, w[0].line, w[1].line
            )
        })
        .collect();
    assert!(
        out_of_order.is_empty(),
        "docs/decisions.md's headings are out of order:\n{}",
        out_of_order.join("\n")
    );
}

#[test]
fn a_citation_wrapped_onto_the_next_comment_line_or_listed_after_a_plural_is_read() {
    // Built with format! so that this file's own text cites nothing.
    let plural = format!("//! Decisions {} and {} concern the pool.", 8, 9);
    assert_eq!(
        citations_in(&plural, None),
        [("decision", 8), ("decision", 9)]
    );
    let wrapped = ["    /// pages unmapped on the way (decision", "    /// 7)."];
    assert_eq!(
        citations_in(wrapped[0], Some(wrapped[1])),
        [("decision", 7)]
    );
    let in_other_words = format!("reissue {} issued {} ISSUE {}", 1, 2, 13);
    assert_eq!(citations_in(&in_other_words, None), [("issue", 13)]);
}
