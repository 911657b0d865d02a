//! The layer rule of docs/architecture.md, read from the sources: src/'s top-level
//! modules import only from lower layers, no two files import each other (directly or
//! round a circle), no file is over 700 lines before its tests and no function over 100.
//!
//! A file's imports are the paths it names from `crate::`, `super::` or `self::`, in
//! `use` lines and in code; a name a module re-exports (`pub use`) counts as the file that
//! defines it. A module's own declarations of its children (`mod`, `pub use`) are its face,
//! not imports. Test code (`#[cfg(test)] mod tests`, `tests.rs`) is left out.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// Top-level modules, lowest layer first. A module may import from lower layers only.
const LAYERS: &[&[&str]] = &[
    &["telemetry", "signal", "compression", "rpc", "prompb", "pyroscope_push", "pprof"],
    &["config", "otlp"],
    &["admission", "quota", "exporter"],
    &["pipeline"],
    &["throttle"],
    &["receiver", "sim"],
    &["app"],
];

const MAX_FILE_LINES: usize = 700;
const MAX_FN_LINES: usize = 100;

struct Source {
    /// Module path, e.g. `["receiver", "otlp", "http"]`; empty for lib.rs.
    module: Vec<String>,
    /// The code before its tests, comment lines removed.
    code: String,
    /// Lines before its tests.
    lines: usize,
}

fn sources() -> BTreeMap<PathBuf, Source> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path.strip_prefix(&root).unwrap().to_path_buf();
            let name = rel.file_name().unwrap().to_str().unwrap();
            if !name.ends_with(".rs") || name == "main.rs" || name == "tests.rs" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let before_tests = match text.find("#[cfg(test)]\nmod tests") {
                Some(i) => &text[..i],
                None => &text[..],
            };
            let code: String = before_tests.lines().filter(|l| !l.trim_start().starts_with("//")).map(|l| format!("{l}\n")).collect();
            let mut module: Vec<String> = rel.with_extension("").iter().map(|s| s.to_str().unwrap().to_string()).collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            out.insert(rel, Source { module, code, lines: before_tests.lines().count() });
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Expands a use tree (`a::b::{c, d::{e, f}}`) into its paths.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.split(" as ").next().unwrap().trim().to_string()];
    };
    let prefix = &tree[..open];
    let Some(close) = tree.rfind('}').filter(|&c| c > open) else { return vec![prefix.trim_end_matches("::").to_string()] };
    let inner = &tree[open + 1..close];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(expand)
        .map(|p| if p == "self" { prefix.trim_end_matches("::").to_string() } else { format!("{prefix}{p}") })
        .collect()
}

/// Every path a file names: the `use` lines expanded, and `crate::`/`super::`/`self::`
/// paths in code. Each with whether it is a `pub use` (a re-export).
fn named_paths(code: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut rest = code;
    // `use` statements (possibly over several lines).
    while let Some(i) = rest.find("use ") {
        // A `use` item starts its line (after `pub`, `pub(crate)` and indentation).
        let line_start = rest[..i].rfind('\n').map_or(0, |n| n + 1);
        let before = rest[line_start..i].trim();
        let at_start = before.is_empty() || before == "pub" || before.starts_with("pub(");
        let after = &rest[i + 4..];
        let end = after.find(';').unwrap_or(after.len());
        if at_start && after.starts_with(|c: char| is_ident(c) || c == '{') {
            let public = rest[..i].trim_end().ends_with("pub") || rest[..i].trim_end().ends_with(')');
            out.extend(expand(&after[..end]).into_iter().map(|p| (p, public)));
            rest = &after[end..];
        } else {
            rest = after;
        }
    }
    // Paths in code.
    for head in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(head) {
            let start = from + i;
            from = start + head.len();
            if code[..start].chars().last().is_some_and(|c| is_ident(c) || c == ':') {
                continue;
            }
            let len = code[start..].find(|c: char| !(is_ident(c) || c == ':')).unwrap_or(code.len() - start);
            out.push((code[start..start + len].trim_end_matches(':').to_string(), false));
        }
    }
    out
}

struct Tree {
    files: BTreeMap<PathBuf, Source>,
    by_module: HashMap<Vec<String>, PathBuf>,
    /// (module, name) → the absolute path it re-exports.
    reexports: HashMap<(Vec<String>, String), Vec<String>>,
}

impl Tree {
    fn new() -> Tree {
        let files = sources();
        let by_module = files.iter().map(|(p, s)| (s.module.clone(), p.clone())).collect();
        let mut tree = Tree { files, by_module, reexports: HashMap::new() };
        let mut reexports = HashMap::new();
        for s in tree.files.values() {
            for (path, public) in named_paths(&s.code) {
                if !public {
                    continue;
                }
                let abs = tree.absolute(&s.module, &path);
                if let Some(name) = abs.last() {
                    reexports.insert((s.module.clone(), name.clone()), abs);
                }
            }
        }
        tree.reexports = reexports;
        tree
    }

    /// `path` as named in `module`, from the crate root. A path that starts with neither
    /// `crate`, `super` nor `self` is relative to `module` (a child or a name in scope).
    fn absolute(&self, module: &[String], path: &str) -> Vec<String> {
        let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
        let mut base: Vec<String> = module.to_vec();
        let mut rest = &segs[..];
        match rest.first() {
            Some(&"crate") => {
                base.clear();
                rest = &rest[1..];
            }
            Some(&"self") => rest = &rest[1..],
            Some(&"super") => {
                while rest.first() == Some(&"super") {
                    base.pop();
                    rest = &rest[1..];
                }
            }
            _ => {}
        }
        base.extend(rest.iter().map(|s| s.to_string()));
        base
    }

    /// The file that defines what `abs` names, following re-exports.
    fn resolve(&self, abs: &[String], depth: usize) -> Option<&PathBuf> {
        let n = (0..=abs.len()).rev().find(|&n| self.by_module.contains_key(&abs[..n]))?;
        if let (Some(name), true) = (abs.get(n), depth < 8) {
            if let Some(target) = self.reexports.get(&(abs[..n].to_vec(), name.clone())) {
                if target.as_slice() != abs {
                    return self.resolve(&[target.as_slice(), &abs[n + 1..]].concat(), depth + 1);
                }
            }
        }
        self.by_module.get(&abs[..n])
    }

    /// file → the files it imports.
    fn edges(&self) -> BTreeMap<&PathBuf, BTreeSet<&PathBuf>> {
        let mut edges: BTreeMap<&PathBuf, BTreeSet<&PathBuf>> = BTreeMap::new();
        for (file, s) in &self.files {
            let set = edges.entry(file).or_default();
            for (path, public) in named_paths(&s.code) {
                let anchored = ["crate::", "super::", "self::"].iter().any(|h| path.starts_with(h));
                if public || !anchored {
                    continue;
                }
                let abs = self.absolute(&s.module, &path);
                // A module's own children are its face, not its imports.
                if abs.len() > s.module.len() && abs.starts_with(&s.module) {
                    continue;
                }
                if let Some(target) = self.resolve(&abs, 0) {
                    if target != file {
                        set.insert(target);
                    }
                }
            }
        }
        edges
    }
}

fn top(tree: &Tree, file: &PathBuf) -> String {
    tree.files[file].module.first().cloned().unwrap_or_else(|| "lib".into())
}

fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

#[test]
fn top_level_modules_import_only_lower_layers() {
    let tree = Tree::new();
    let mut wrong = Vec::new();
    for (from, targets) in tree.edges() {
        let (a, la) = (top(&tree, from), layer(&top(&tree, from)));
        if a == "lib" {
            continue;
        }
        assert!(la.is_some(), "src/{} is in no layer: add `{a}` to LAYERS and to docs/architecture.md", from.display());
        for to in targets {
            let b = top(&tree, to);
            if a != b && layer(&b) >= la {
                wrong.push(format!("src/{} ({a}) imports src/{} ({b})", from.display(), to.display()));
            }
        }
    }
    assert!(wrong.is_empty(), "imports that break the layer rule:\n{}", wrong.join("\n"));
}

#[test]
fn no_two_files_import_each_other() {
    let tree = Tree::new();
    let edges = tree.edges();
    // Tarjan's strongly connected components: any with two or more files is a circle.
    struct State<'a> {
        edges: &'a BTreeMap<&'a PathBuf, BTreeSet<&'a PathBuf>>,
        index: HashMap<&'a PathBuf, usize>,
        low: HashMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        circles: Vec<Vec<&'a PathBuf>>,
    }
    fn visit<'a>(st: &mut State<'a>, v: &'a PathBuf) {
        let i = st.index.len();
        st.index.insert(v, i);
        st.low.insert(v, i);
        st.stack.push(v);
        for &w in st.edges.get(v).into_iter().flatten() {
            if !st.index.contains_key(w) {
                visit(st, w);
                let lw = st.low[w];
                st.low.entry(v).and_modify(|l| *l = (*l).min(lw));
            } else if st.stack.contains(&w) {
                let iw = st.index[w];
                st.low.entry(v).and_modify(|l| *l = (*l).min(iw));
            }
        }
        if st.low[v] == st.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = st.stack.pop() {
                comp.push(w);
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                st.circles.push(comp);
            }
        }
    }
    let mut st = State { edges: &edges, index: HashMap::new(), low: HashMap::new(), stack: Vec::new(), circles: Vec::new() };
    for v in edges.keys() {
        if !st.index.contains_key(v) {
            visit(&mut st, v);
        }
    }
    let circles: Vec<String> =
        st.circles.iter().map(|c| c.iter().map(|p| format!("src/{}", p.display())).collect::<Vec<_>>().join(" ↔ ")).collect();
    assert!(circles.is_empty(), "files that import each other:\n{}", circles.join("\n"));
}

#[test]
fn files_and_functions_stay_readable() {
    let tree = Tree::new();
    let mut long = Vec::new();
    for (file, s) in &tree.files {
        if s.lines > MAX_FILE_LINES {
            long.push(format!("src/{}: {} lines before its tests (at most {MAX_FILE_LINES})", file.display(), s.lines));
        }
        let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(file)).unwrap();
        let lines: Vec<&str> = text.lines().take(s.lines).collect();
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim_start();
            let is_fn =
                ["fn ", "pub fn ", "async fn ", "pub async fn ", "pub(crate) fn ", "pub(crate) async fn ", "const fn ", "pub const fn "]
                    .iter()
                    .any(|p| t.starts_with(p));
            if !is_fn || t.ends_with(';') {
                continue;
            }
            let indent = line.len() - t.len();
            let end = lines[i + 1..]
                .iter()
                .position(|l| l.len() - l.trim_start().len() == indent && l.trim_start().starts_with('}'))
                .map_or(0, |n| n + 2);
            if end > MAX_FN_LINES {
                let name: String = t.split("fn ").nth(1).unwrap_or("").chars().take_while(|&c| is_ident(c)).collect();
                long.push(format!("src/{}:{}: fn {name} is {end} lines (at most {MAX_FN_LINES})", file.display(), i + 1));
            }
        }
    }
    assert!(long.is_empty(), "too long to read at a glance:\n{}", long.join("\n"));
}

#[test]
fn the_reader_sees_a_real_tree() {
    // The checks above would pass on an empty or misread tree: make sure they see the code.
    let tree = Tree::new();
    assert!(tree.files.len() > 80, "{} files", tree.files.len());
    let edges = tree.edges();
    let http = PathBuf::from("receiver/otlp/http.rs");
    let ingest = PathBuf::from("receiver/ingest.rs");
    assert!(edges[&http].contains(&ingest), "receiver/otlp/http.rs names Ingest through receiver/mod.rs's re-export");
    let throttle_mod = PathBuf::from("throttle/mod.rs");
    assert!(edges[&throttle_mod].iter().any(|p| p.starts_with("admission")), "the throttle uses the admission layers");
}
