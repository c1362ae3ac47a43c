//! Writes default-corpus documents as plain text, separated by `<|endoftext|>`, to time
//! `swax prepare` on a realistic input:
//! `cargo run --release -p swax-bench --bin gen_text -- OUT.txt [MEGABYTES] [SEED]`.
//! Also handy to look at what the default corpus reads like.

use std::io::{BufWriter, Write};

use swax_data::tokenizer::{BytesTokenizer, EOT_TEXT};
use swax_data::{Corpus, CorpusConfig, Split, Tokenizer};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        return Err("usage: gen_text OUT.txt [MEGABYTES] [SEED]".into());
    };
    let megabytes: usize = args.get(2).map_or(Ok(100), |s| s.parse())?;
    let seed: u64 = args.get(3).map_or(Ok(0), |s| s.parse())?;
    let tok = BytesTokenizer;
    let corpus = Corpus::new(
        &tok,
        CorpusConfig {
            seed,
            ..CorpusConfig::default()
        },
    )?;
    let mut out = BufWriter::new(std::fs::File::create(path)?);
    let (mut written, mut docs) = (0, 0);
    while written < megabytes * 1_000_000 {
        let text = tok.decode(&corpus.document(Split::Train, docs).tokens)?;
        let line = format!("{}\n{EOT_TEXT}\n", text.trim());
        out.write_all(line.as_bytes())?;
        written += line.len();
        docs += 1;
    }
    out.flush()?;
    println!("{path}: {docs} documents, {written} bytes");
    Ok(())
}
