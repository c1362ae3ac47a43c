//! Every test that needs a GPU is marked `#[ignore = "needs ... GPU ..."]`, so that `cargo test`
//! on a machine without one lists it as ignored, with the reason, and counts it in its summary,
//! instead of passing it after an early return. The GPU runs (`.gpu/run`, or `cargo test --
//! --include-ignored`) run them, with `SWAX_REQUIRE_CUDA=1` to fail where no GPU is found.
//!
//! It reads the workspace's sources, found from the working directory up (cargo runs a test in
//! its package's folder; `.gpu/run` in the repository's root).
use std::path::{Path, PathBuf};

/// The functions that get a GPU (or skip): the helpers of `swax-tests` and `swax-hybrid`'s GPU
/// tests; `swax-cuda`'s tests call `gpu!()` or `common::device()`.
const GETTERS: [&str; 3] = ["gpu", "gpus", "common::device"];

fn workspace_root() -> PathBuf {
    let here = std::env::current_dir().expect("a working directory");
    here.ancestors()
        .find(|d| {
            std::fs::read_to_string(d.join("Cargo.toml")).is_ok_and(|t| t.contains("[workspace]"))
        })
        .unwrap_or_else(|| {
            panic!(
                "no workspace above {}: run from the checkout",
                here.display()
            )
        })
        .to_owned()
}

/// The `.rs` files under `dir`, leaving out build outputs and hidden folders.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() && !name.starts_with('.') && !name.starts_with("target") {
            sources(&path, out);
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// Every function of `text` (rustfmt's layout: a body ends at the closing brace at its `fn`'s
/// indentation): whether it is a `#[test]` and its attributes, its name, its body.
struct Function {
    test: bool,
    attrs: String,
    name: String,
    body: String,
}

fn functions(text: &str) -> Vec<Function> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (f, line) in lines.iter().enumerate() {
        let code = line.trim_start();
        let Some(rest) = ["fn ", "pub fn ", "pub(crate) fn "]
            .iter()
            .find_map(|p| code.strip_prefix(p))
        else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let indent = &line[..line.len() - code.len()];
        let end = match line.ends_with('}') {
            true => f,
            false => (f..lines.len())
                .find(|&j| lines[j] == format!("{indent}}}"))
                .unwrap_or(lines.len() - 1),
        };
        let attrs_from = (0..f)
            .rev()
            .take_while(|&j| lines[j].trim_start().starts_with("#["))
            .last()
            .unwrap_or(f);
        let attrs = lines[attrs_from..f].join("\n");
        found.push(Function {
            test: attrs.lines().any(|a| a.trim() == "#[test]"),
            attrs,
            name,
            // The signature left out: a helper named like a getter does not call itself.
            body: lines[f + 1..=end.max(f)].join("\n"),
        });
    }
    found
}

/// Whether `body` calls `name` (a function, a macro or a generic function), not a method of that
/// name or a longer identifier ending in it.
fn calls(body: &str, name: &str) -> bool {
    body.match_indices(name).any(|(i, _)| {
        let before = body[..i].chars().next_back();
        let after = &body[i + name.len()..];
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
            && ["(", "!(", "::<"].iter().any(|p| after.starts_with(p))
    })
}

#[test]
fn every_gpu_test_is_ignored_with_its_reason() {
    let mut files = Vec::new();
    sources(&workspace_root(), &mut files);
    let mut unmarked = Vec::new();
    let mut marked = 0;
    for file in &files {
        let functions = functions(&std::fs::read_to_string(file).unwrap());
        // The getters, and the functions of this file that call one, to a fixed point.
        let mut gpu: Vec<String> = GETTERS.map(String::from).to_vec();
        while let Some(f) = functions
            .iter()
            .find(|f| !gpu.contains(&f.name) && gpu.iter().any(|g| calls(&f.body, g)))
        {
            gpu.push(f.name.clone());
        }
        for f in functions.iter().filter(|f| f.test && gpu.contains(&f.name)) {
            let reason = f
                .attrs
                .lines()
                .find_map(|a| a.trim().strip_prefix("#[ignore = \""));
            match reason {
                Some(r) if r.starts_with("needs ") && r.contains("GPU") => marked += 1,
                _ => unmarked.push(format!("{}: {}", file.display(), f.name)),
            }
        }
    }
    assert!(
        unmarked.is_empty(),
        "GPU tests without #[ignore = \"needs a CUDA GPU ...\"]:\n{}",
        unmarked.join("\n")
    );
    // The scan finds the GPU tests at all (a change of layout would make it pass vacuously).
    assert!(marked > 50, "only {marked} GPU tests found");
}
