//! The facts a generated document states once and recalls later, and the words around them.
//!
//! A fact binds a key (which may appear once per document) to a value; it is stated in one
//! sentence and recalled in another, and the recall's value is the answer a model can only get
//! by remembering the statement. The embedded corpus's two kinds (codes of coloured objects,
//! people's towns) recall with the very sentence that stated them; the recall-training kinds
//! (pass keys, special numbers) vary their wording, and none of their sentences is the wording of
//! the evaluation tasks (`tasks::passkey`, `tasks::niah`), so a model is never scored on text it
//! was trained on word for word.

use crate::corpus::grammar::{ADJECTIVES, COLORS, NAMES, NOUNS, OBJECTS, TOWNS};
use crate::rng::Rng;

/// Which facts a document draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FactMix {
    /// The embedded corpus: codes of coloured objects and people's towns.
    Corpus,
    /// Pass keys under several names and wordings.
    Passkey,
    /// All kinds, in equal shares.
    All,
}

/// A fact: its key (unique within a document) and its value.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Fact {
    /// "The code of the blue door is 48213."
    Code {
        color: usize,
        object: usize,
        code: u32,
    },
    /// "Mira lives in Elmsford."
    Home { name: usize, town: usize },
    /// A 3- to 6-digit key under one of [`KEY_LABELS`].
    Passkey { label: usize, key: u32 },
    /// A 7-digit number for an adjective-noun pair ("quiet-basket").
    Number { adj: usize, noun: usize, value: u32 },
}

/// What pass keys are called in training text; the evaluation's "pass key" is among them, its
/// question's wording is not.
const KEY_LABELS: &[&str] = &[
    "pass key",
    "secret code",
    "door code",
    "access number",
    "safe combination",
    "locker number",
    "account pin",
    "ticket number",
];

impl Fact {
    pub(crate) fn random(rng: &mut Rng, mix: FactMix) -> Fact {
        let index = |rng: &mut Rng, n: usize| rng.below(n as u64) as usize;
        let kind = match mix {
            FactMix::Corpus => rng.below(2),
            FactMix::Passkey => 2,
            FactMix::All => rng.below(4),
        };
        match kind {
            0 => Fact::Code {
                color: index(rng, COLORS.len()),
                object: index(rng, OBJECTS.len()),
                code: 10000 + rng.below(90000) as u32,
            },
            1 => Fact::Home {
                name: index(rng, NAMES.len()),
                town: index(rng, TOWNS.len()),
            },
            2 => {
                let digits = 3 + rng.below(4) as u32;
                let lo = 10u32.pow(digits - 1);
                Fact::Passkey {
                    label: index(rng, KEY_LABELS.len()),
                    key: lo + rng.below(u64::from(9 * lo)) as u32,
                }
            }
            _ => Fact::Number {
                adj: index(rng, ADJECTIVES.len()),
                noun: index(rng, NOUNS.len()),
                value: 1_000_000 + rng.below(9_000_000) as u32,
            },
        }
    }

    /// Distinct for facts that must not share a document (one value per key).
    pub(crate) fn key(self) -> (u8, usize) {
        match self {
            Fact::Code { color, object, .. } => (0, color * OBJECTS.len() + object),
            Fact::Home { name, .. } => (1, name),
            Fact::Passkey { label, .. } => (2, label),
            Fact::Number { adj, noun, .. } => (3, adj * NOUNS.len() + noun),
        }
    }

    fn value(self) -> String {
        match self {
            Fact::Code { code, .. } => format!(" {code}"),
            Fact::Home { town, .. } => format!(" {}", TOWNS[town]),
            Fact::Passkey { key, .. } => format!(" {key}"),
            Fact::Number { value, .. } => format!(" {value}"),
        }
    }

    /// The statement: the words before the value, the value, the words after it.
    pub(crate) fn statement(self, rng: &mut Rng) -> [String; 3] {
        let v = self.value();
        match self {
            Fact::Code { color, object, .. } => [
                format!(" The code of the {} {} is", COLORS[color], OBJECTS[object]),
                v,
                ".".into(),
            ],
            Fact::Home { name, .. } => [format!(" {} lives in", NAMES[name]), v, ".".into()],
            Fact::Passkey { label, .. } => {
                let l = KEY_LABELS[label];
                match rng.below(3) {
                    0 => [format!(" The {l} is"), v, ".".into()],
                    1 => [format!(" Remember this: the {l} is"), v, ".".into()],
                    _ => [
                        format!(" Please note the {l}:"),
                        v,
                        ". Keep it safe.".into(),
                    ],
                }
            }
            Fact::Number { adj, noun, .. } => {
                let key = format!("{}-{}", ADJECTIVES[adj], NOUNS[noun]);
                match rng.below(2) {
                    0 => [format!(" The special number for {key} is"), v, ".".into()],
                    _ => [" Write down".into(), v, format!(" as the number of {key}.")],
                }
            }
        }
    }

    /// The recall: the words before the value (the value is the answer), the value, and after.
    pub(crate) fn recall(self, rng: &mut Rng) -> [String; 3] {
        let v = self.value();
        match self {
            Fact::Code { .. } | Fact::Home { .. } => {
                let [prefix, _, _] = self.statement(rng);
                [prefix, v, ".".into()]
            }
            Fact::Passkey { label, .. } => {
                let l = KEY_LABELS[label];
                match rng.below(3) {
                    0 => [format!(" Which {l} was given? It was"), v, ".".into()],
                    1 => [format!(" As noted before, the {l} is"), v, ".".into()],
                    _ => [format!(" Recall the {l}:"), v, ".".into()],
                }
            }
            Fact::Number { adj, noun, .. } => {
                let key = format!("{}-{}", ADJECTIVES[adj], NOUNS[noun]);
                match rng.below(2) {
                    0 => [format!(" So the number for {key} was"), v, ".".into()],
                    _ => [format!(" Asked about {key}, the answer is"), v, ".".into()],
                }
            }
        }
    }
}
