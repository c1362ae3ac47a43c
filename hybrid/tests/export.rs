//! `swax export --hf` and `swax import` on the CPU, without torch: what the export folder holds
//! (files, tensor names under `model.`, shapes, the config round trip, the tokenizer), that an
//! import gives back every parameter bit for bit and a run `swax generate` loads, and that a
//! broken export is refused naming what is wrong.
mod common;

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;
use swax_hybrid::config::Config;
use swax_hybrid::export::{self, import, CONFIGURATION_PY, MODELING_PY, PREFIX};
use swax_hybrid::loaded;
use swax_nn::checkpoint;
use swax_tensor::{Device, Tensor};

/// A two-step run of every mixer, trained into `dir/run`.
fn trained(dir: &Path) -> (Config, std::path::PathBuf) {
    let cfg = common::micro("MRGSF", 2, &["model.n_layers=5"]);
    let run = dir.join("run");
    common::run(&cfg, &run, Device::Cpu, false, None);
    (cfg, run)
}

/// A safetensors file's tensors by name.
type Named = Vec<(String, Tensor)>;

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

fn weights(path: &Path) -> HashMap<String, Tensor> {
    checkpoint::load(path).unwrap().0
}

#[test]
fn an_export_holds_the_model_under_its_modeling_names_and_imports_back_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, run) = trained(dir.path());
    let out = dir.path().join("hf");
    let e = export::export(&run, &out).unwrap();
    assert_eq!(e.step, 2);

    for f in [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "configuration_swax.py",
        "modeling_swax.py",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        assert!(out.join(f).is_file(), "the export lacks {f}");
    }
    // The Python files are the repository's, as they are.
    assert_eq!(
        std::fs::read_to_string(out.join("modeling_swax.py")).unwrap(),
        MODELING_PY
    );
    assert_eq!(
        std::fs::read_to_string(out.join("configuration_swax.py")).unwrap(),
        CONFIGURATION_PY
    );
    // The modeling file defines every mixer and the pieces transformers looks for.
    for name in [
        "class Attention",
        "class Mlstm",
        "class GatedDelta",
        "class RAttention",
        "def mlstm_step",
        "class SwaxCache",
        "class SwaxForCausalLM(PreTrainedModel, GenerationMixin)",
    ] {
        assert!(MODELING_PY.contains(name), "modeling_swax.py lacks {name}");
    }

    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(json["model_type"], "swax");
    assert_eq!(
        json["auto_map"]["AutoModelForCausalLM"],
        "modeling_swax.SwaxForCausalLM"
    );
    assert_eq!(
        json["auto_map"]["AutoConfig"],
        "configuration_swax.SwaxConfig"
    );
    let model = serde_json::to_value(&cfg.model).unwrap();
    for (key, value) in model.as_object().unwrap() {
        assert_eq!(&json[key], value, "config.json's {key}");
    }
    assert_eq!(json["window"], cfg.train.w_long);
    assert_eq!(json["tokenizer"], "bytes");
    assert_eq!(json["eos_token_id"], 0);

    // Every parameter under `model.NAME`, its shape and its bits; nothing else.
    let exported = weights(&out.join("model.safetensors"));
    let ckpt = loaded::load(&run, Device::Cpu).unwrap();
    assert_eq!(exported.len(), ckpt.model.params.len());
    for p in ckpt.model.params.iter() {
        let t = &exported[&format!("{PREFIX}{}", p.name)];
        assert_eq!(t.dims(), p.value.dims(), "{}", p.name);
        assert_eq!(bits(t), bits(&p.value), "{}", p.name);
    }
    for name in [
        "model.embed.weight",
        "model.head.weight",
        "model.blocks.0.mixer.qkv.weight",
        "model.blocks.1.mixer.norm_rla.weight",
        "model.blocks.2.mixer.a_log",
        "model.blocks.4.mlp.gate_up.weight",
    ] {
        assert!(exported.contains_key(name), "the export lacks {name}");
    }

    // The byte tokenizer's tokenizer.json maps every byte to itself, through Hugging Face's
    // own library.
    let tok = tokenizers::Tokenizer::from_file(out.join("tokenizer.json")).unwrap();
    let text = "Ab\u{0}é \n~\u{7f}ÿ  x";
    let ids = tok.encode(text, false).unwrap().get_ids().to_vec();
    let want: Vec<u32> = text.bytes().map(u32::from).collect();
    assert_eq!(ids, want);
    assert_eq!(tok.decode(&want, false).unwrap(), text);
    assert_eq!(tok.get_vocab_size(true), 256);

    // Back: the same config, the same bits, a run that loads.
    let back = dir.path().join("back");
    let i = import(&out, &back).unwrap();
    assert_eq!(i.step, 2);
    let again = loaded::load(&back, Device::Cpu).unwrap();
    assert_eq!(again.cfg, ckpt.cfg);
    for (a, b) in again.model.params.iter().zip(ckpt.model.params.iter()) {
        assert_eq!(a.name, b.name);
        assert_eq!(bits(&a.value), bits(&b.value), "{}", a.name);
    }
    // And once more: an import exports to the same files.
    let out2 = dir.path().join("hf2");
    export::export(&back, &out2).unwrap();
    for f in ["model.safetensors", "config.json", "tokenizer.json"] {
        assert_eq!(
            std::fs::read(out.join(f)).unwrap(),
            std::fs::read(out2.join(f)).unwrap(),
            "{f} differs after a round trip"
        );
    }
}

#[test]
fn a_broken_export_is_refused_naming_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let (_, run) = trained(dir.path());
    let out = dir.path().join("hf");
    export::export(&run, &out).unwrap();
    let file = out.join("model.safetensors");
    let original = weights(&file);

    let rewrite = |change: &dyn Fn(&mut Named)| {
        let mut ts: Vec<(String, Tensor)> = original
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        ts.sort_by(|a, b| a.0.cmp(&b.0));
        change(&mut ts);
        let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
        checkpoint::save(&file, &ts, meta).unwrap();
    };
    let refused = |n: &str| -> String {
        let back = dir.path().join(n);
        let e = import(&out, &back).unwrap_err().to_string();
        assert!(!back.exists(), "a refused import left {}", back.display());
        e
    };

    rewrite(&|ts| ts.retain(|(k, _)| k != "model.blocks.2.mixer.a_log"));
    let e = refused("missing");
    assert!(
        e.contains("missing: model.blocks.2.mixer.a_log"),
        "unexpected error: {e}"
    );

    rewrite(&|ts| {
        for (k, _) in ts.iter_mut() {
            if k == "model.head.weight" {
                *k = "head.weight".into();
            }
        }
    });
    let e = refused("renamed");
    assert!(
        e.contains("missing: model.head.weight") && e.contains("unexpected: head.weight"),
        "unexpected error: {e}"
    );

    rewrite(&|ts| {
        for (k, t) in ts.iter_mut() {
            if k == "model.embed.weight" {
                let n = t.dims().iter().product::<usize>();
                *t = Tensor::from_vec(vec![0f32; n], vec![n], Device::Cpu).unwrap();
            }
        }
    });
    let e = refused("reshaped");
    assert!(
        e.contains("model.embed.weight: shape"),
        "unexpected error: {e}"
    );

    // A changed model field at the top of config.json is the model imported; a missing one is
    // refused by name.
    rewrite(&|_| {});
    let path = out.join("config.json");
    let mut json: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    json.as_object_mut().unwrap().remove("d_ff");
    std::fs::write(&path, serde_json::to_string(&json).unwrap()).unwrap();
    let e = refused("no-d-ff");
    assert!(
        e.contains("lacks the model field d_ff"),
        "unexpected error: {e}"
    );
    json["model_type"] = "llama".into();
    std::fs::write(&path, serde_json::to_string(&json).unwrap()).unwrap();
    let e = refused("llama");
    assert!(e.contains("not a swax export"), "unexpected error: {e}");

    // A folder with no config.json at all (a run folder, say) is named as not an export.
    let plain = dir.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let e = import(&plain, &dir.path().join("from-plain"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("not a Hugging Face export"),
        "unexpected error: {e}"
    );
}

#[test]
fn an_export_or_import_into_a_folder_that_is_not_empty_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_, run) = trained(dir.path());
    let out = dir.path().join("hf");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("keep.txt"), "mine").unwrap();
    let e = export::export(&run, &out).unwrap_err().to_string();
    assert!(e.contains("not empty"), "unexpected error: {e}");
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);
    // An empty folder is filled; nothing is left beside it.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    export::export(&run, &empty).unwrap();
    let e = import(&empty, &out).unwrap_err().to_string();
    assert!(e.contains("not empty"), "unexpected error: {e}");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "left behind: {leftovers:?}");
}
