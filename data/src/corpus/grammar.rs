//! A small English-like grammar: the vocabulary and sentence templates of the default corpus's
//! filler and of the needle-in-a-haystack haystack. Filler is predictable from local context
//! (a few words back), so what a model cannot predict locally is exactly the facts it must recall.

use crate::rng::Rng;

pub(crate) const NAMES: &[&str] = &[
    "Mira", "Tomas", "Ada", "Jonah", "Lena", "Omar", "Priya", "Felix", "Nora", "Ivan", "Sofia",
    "Hugo", "Yuki", "Elias", "Zara", "Bruno", "Clara", "Devi", "Ines", "Leo", "Maren", "Otto",
    "Rosa", "Samir",
];
pub(crate) const COLORS: &[&str] = &[
    "red", "blue", "green", "yellow", "black", "white", "silver", "golden", "purple", "orange",
    "grey", "brown",
];
pub(crate) const OBJECTS: &[&str] = &[
    "door", "box", "gate", "lamp", "chest", "locker", "safe", "drawer", "cabinet", "vault",
    "trunk", "crate",
];
pub(crate) const TOWNS: &[&str] = &[
    "Brackwater",
    "Elmsford",
    "Northvale",
    "Stonebridge",
    "Ashcombe",
    "Riverton",
    "Kelbury",
    "Dunmore",
    "Fairholt",
    "Greywick",
    "Lowmere",
    "Oakhaven",
    "Pennick",
    "Saltmarsh",
    "Thornby",
    "Wexley",
];
pub(crate) const ADJECTIVES: &[&str] = &[
    "old", "small", "quiet", "bright", "heavy", "narrow", "warm", "cold", "tall", "round", "dusty",
    "gentle", "busy", "empty", "wooden", "distant", "hidden", "broken", "clever", "patient",
];
pub(crate) const NOUNS: &[&str] = &[
    "cat", "farmer", "river", "window", "letter", "garden", "boat", "teacher", "road", "basket",
    "horse", "painter", "bridge", "candle", "kettle", "baker", "tower", "field", "map", "bell",
];
const PLACES: &[&str] = &[
    "market", "station", "library", "harbor", "forest", "square", "kitchen", "orchard", "mill",
    "chapel",
];
const VERBS_INTRANSITIVE: &[&str] = &[
    "waited", "rested", "slept", "wandered", "sang", "shone", "stood", "laughed", "paused",
    "listened",
];
const VERBS_TRANSITIVE: &[&str] = &[
    "carried", "painted", "found", "opened", "watched", "moved", "cleaned", "fixed", "visited",
    "counted",
];
const PREPOSITIONS: &[&str] = &[
    "near", "under", "behind", "beside", "across", "inside", "above",
];
const TIMES: &[&str] = &[
    "in the morning",
    "at noon",
    "after dinner",
    "before dawn",
    "on Sunday",
    "late at night",
    "in the spring",
    "every evening",
];
const ADVERBS: &[&str] = &[
    "slowly",
    "quietly",
    "again",
    "for a while",
    "without a sound",
];

/// One filler sentence with a leading space, ready to append to running text.
pub(crate) fn filler(rng: &mut Rng) -> String {
    let template = rng.below(6);
    let mut w = |list: &[&'static str]| *rng.pick(list);
    match template {
        0 => format!(
            " The {} {} {} {} the {} {}.",
            w(ADJECTIVES),
            w(NOUNS),
            w(VERBS_INTRANSITIVE),
            w(PREPOSITIONS),
            w(ADJECTIVES),
            w(NOUNS)
        ),
        1 => format!(
            " {} {} the {} {}.",
            w(NAMES),
            w(VERBS_TRANSITIVE),
            w(NOUNS),
            w(TIMES)
        ),
        2 => format!(
            " {}, {} and {} {} near the {}.",
            capitalize(w(TIMES)),
            w(NAMES),
            w(NAMES),
            w(VERBS_INTRANSITIVE),
            w(PLACES)
        ),
        3 => format!(
            " It was a {} day, and the {} {} {}.",
            w(ADJECTIVES),
            w(NOUNS),
            w(VERBS_INTRANSITIVE),
            w(ADVERBS)
        ),
        4 => format!(
            " {} said that the {} was {}.",
            w(NAMES),
            w(NOUNS),
            w(ADJECTIVES)
        ),
        _ => format!(
            " The {} {} the {} at the {}.",
            w(NOUNS),
            w(VERBS_TRANSITIVE),
            w(NOUNS),
            w(PLACES)
        ),
    }
}

fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}
