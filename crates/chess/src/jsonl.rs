//! The reference JSONL line of one example (spec E.6), byte-exact, and a parser back.
//!
//! * Keys in the reference order: `example_id`, `moves`, `states`, `steps`, `plies`,
//!   `fullmoves`, `result`, `spec`.
//! * Formatting as Python's `json.dumps` with default arguments: `", "` and `": "` separators,
//!   non-ASCII characters escaped as `\uXXXX` (lower-case hex, surrogate pairs above U+FFFF).
//! * The writer appends to a caller-owned `Vec<u8>`, so one buffer serves a whole shard.

use serde_json::Value;
use thiserror::Error;

use crate::encode::{PAD, START, STATE_LEN, StateLabels, VOCAB_SIZE};

/// The `spec` object of every line, exactly as the reference writes it.
pub const SPEC_JSON: &str = concat!(
    r#"{"move_vocab": 20482, "start_move_id": 20480, "pad_move_id": 20481, "state_len": 75, "#,
    r#""piece_symbols": [".", "P", "N", "B", "R", "Q", "K", "p", "n", "b", "r", "q", "k"], "#,
    r#""square_order": "a8..h8,a7..h7,...,a1..h1", "state_layout": {"#,
    r#""pieces_0_63": "piece_id in 0..12 over PIECE_SYMBOLS", "side_64": "0=w,1=b", "#,
    r#""castle_65_68": "K,Q,k,q bits in {0,1}", "ep_file_69": "0='-',1..8='a'..'h'", "#,
    r#""ep_rank_70": "0='-',1='3',2='6'", "halfmove_71_72": "uint16 hi,lo (0..65535)", "#,
    r#""fullmove_73_74": "uint16 hi,lo (0..65535)"}}"#
);

/// A problem writing or parsing a line.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum JsonlError {
    /// Moves and states differ in length, or are empty.
    #[error("{moves} moves and {states} states; both need the same non-zero length")]
    Shape {
        /// Number of move tokens.
        moves: usize,
        /// Number of states.
        states: usize,
    },
    /// The line is not JSON.
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A field is missing or has the wrong type or range.
    #[error("field {field}: {problem}")]
    Field {
        /// The field's key.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
}

/// One example as read back from a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    /// `example_id`.
    pub example_id: String,
    /// `moves`, [`START`] first.
    pub moves: Vec<u16>,
    /// `states`, start position first.
    pub states: Vec<StateLabels>,
    /// `result`.
    pub result: String,
    /// Whether `spec` equals [`SPEC_JSON`].
    pub spec_matches: bool,
}

/// Appends one line (with its trailing `\n`) for an example to `out`. `moves` starts with
/// [`START`] and has one entry per state; `steps`, `plies` and `fullmoves` are derived.
///
/// # Errors
///
/// [`JsonlError::Shape`] when `moves` and `states` differ in length or are empty; nothing is
/// appended then.
pub fn append_example_line(
    out: &mut Vec<u8>,
    example_id: &str,
    moves: &[u16],
    states: &[StateLabels],
    result: &str,
) -> Result<(), JsonlError> {
    if moves.len() != states.len() || moves.is_empty() {
        return Err(JsonlError::Shape {
            moves: moves.len(),
            states: states.len(),
        });
    }
    let steps = moves.len();
    let plies = steps - 1;
    let fullmoves = plies.div_ceil(2);
    out.reserve(64 + steps * (7 + STATE_LEN * 3) + SPEC_JSON.len());

    out.extend_from_slice(b"{\"example_id\": ");
    append_json_string(out, example_id);
    out.extend_from_slice(b", \"moves\": [");
    for (i, &id) in moves.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        append_decimal(out, u64::from(id));
    }
    out.extend_from_slice(b"], \"states\": [");
    for (i, state) in states.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        out.push(b'[');
        for (j, &label) in state.iter().enumerate() {
            if j > 0 {
                out.extend_from_slice(b", ");
            }
            append_decimal(out, u64::from(label));
        }
        out.push(b']');
    }
    out.extend_from_slice(b"], \"steps\": ");
    append_decimal(out, steps as u64);
    out.extend_from_slice(b", \"plies\": ");
    append_decimal(out, plies as u64);
    out.extend_from_slice(b", \"fullmoves\": ");
    append_decimal(out, fullmoves as u64);
    out.extend_from_slice(b", \"result\": ");
    append_json_string(out, result);
    out.extend_from_slice(b", \"spec\": ");
    out.extend_from_slice(SPEC_JSON.as_bytes());
    out.extend_from_slice(b"}\n");
    Ok(())
}

/// Appends the decimal digits of `value`.
fn append_decimal(out: &mut Vec<u8>, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[start..]);
}

/// Appends `text` as a JSON string the way Python's `json.dumps` (with `ensure_ascii`) does.
fn append_json_string(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let push_unit = |out: &mut Vec<u8>, unit: u16| {
        out.extend_from_slice(b"\\u");
        for shift in [12, 8, 4, 0] {
            out.push(HEX[usize::from((unit >> shift) & 15)]);
        }
    };
    out.push(b'"');
    for c in text.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            ' '..='~' => out.push(c as u8),
            _ => {
                let mut units = [0u16; 2];
                for &unit in c.encode_utf16(&mut units).iter() {
                    push_unit(out, unit);
                }
            }
        }
    }
    out.push(b'"');
}

/// Parses one line back into an [`Example`], checking that `steps`, `plies` and `fullmoves`
/// agree with the moves, that every state has 75 labels in `0..=255` and every move is a move
/// id, [`START`] or [`PAD`].
///
/// # Errors
///
/// [`JsonlError`] for malformed JSON or a missing, mistyped or inconsistent field.
pub fn parse_example_line(line: &str) -> Result<Example, JsonlError> {
    let value: Value = serde_json::from_str(line)?;
    let field = |name: &'static str| {
        value.get(name).ok_or(JsonlError::Field {
            field: name,
            problem: "missing".to_owned(),
        })
    };
    let bad = |field: &'static str, problem: &str| JsonlError::Field {
        field,
        problem: problem.to_owned(),
    };
    let string = |name: &'static str| -> Result<String, JsonlError> {
        field(name)?
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| bad(name, "not a string"))
    };
    let count = |name: &'static str| -> Result<u64, JsonlError> {
        field(name)?
            .as_u64()
            .ok_or_else(|| bad(name, "not a non-negative integer"))
    };

    let example_id = string("example_id")?;
    let result = string("result")?;
    let moves = field("moves")?
        .as_array()
        .ok_or_else(|| bad("moves", "not an array"))?
        .iter()
        .map(|id| {
            id.as_u64()
                .and_then(|id| u16::try_from(id).ok())
                .filter(|&id| id < VOCAB_SIZE)
                .ok_or_else(|| bad("moves", "an entry is not a token id"))
        })
        .collect::<Result<Vec<u16>, _>>()?;
    let states = field("states")?
        .as_array()
        .ok_or_else(|| bad("states", "not an array"))?
        .iter()
        .map(|state| {
            let labels = state
                .as_array()
                .filter(|labels| labels.len() == STATE_LEN)
                .ok_or_else(|| bad("states", "an entry is not an array of 75 labels"))?;
            let mut out = [0u8; STATE_LEN];
            for (slot, label) in out.iter_mut().zip(labels) {
                *slot = label
                    .as_u64()
                    .and_then(|label| u8::try_from(label).ok())
                    .ok_or_else(|| bad("states", "a label is not in 0..=255"))?;
            }
            Ok(out)
        })
        .collect::<Result<Vec<StateLabels>, JsonlError>>()?;

    if moves.first() != Some(&START) || moves[1..].contains(&START) || moves.contains(&PAD) {
        return Err(bad("moves", "must be START followed by move ids"));
    }
    if states.len() != moves.len() {
        return Err(bad("states", "length differs from moves"));
    }
    let steps = moves.len() as u64;
    if count("steps")? != steps {
        return Err(bad("steps", "differs from the number of moves"));
    }
    if count("plies")? != steps - 1 {
        return Err(bad("plies", "is not steps - 1"));
    }
    if count("fullmoves")? != steps / 2 {
        return Err(bad("fullmoves", "is not (plies + 1) // 2"));
    }
    let spec: Value = serde_json::from_str(SPEC_JSON)?;
    let spec_matches = field("spec")? == &spec;
    Ok(Example {
        example_id,
        moves,
        states,
        result,
        spec_matches,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::INITIAL_STATE;

    #[test]
    fn spec_json_is_valid_and_complete() {
        let spec: Value = serde_json::from_str(SPEC_JSON).unwrap();
        assert_eq!(spec["move_vocab"], u64::from(VOCAB_SIZE));
        assert_eq!(spec["start_move_id"], u64::from(START));
        assert_eq!(spec["pad_move_id"], u64::from(PAD));
        assert_eq!(spec["state_len"], STATE_LEN as u64);
        let symbols: String = spec["piece_symbols"]
            .as_array()
            .unwrap()
            .iter()
            .map(|symbol| symbol.as_str().unwrap())
            .collect();
        let expected: String = crate::encode::PIECE_SYMBOLS.iter().collect();
        assert_eq!(symbols, expected);
    }

    #[test]
    fn writes_python_formatting() {
        let mut out = Vec::new();
        append_example_line(
            &mut out,
            "cwm_x",
            &[START, 4955],
            &[INITIAL_STATE, INITIAL_STATE],
            "1-0",
        )
        .unwrap();
        let line = String::from_utf8(out).unwrap();
        assert!(line.starts_with(
            "{\"example_id\": \"cwm_x\", \"moves\": [20480, 4955], \"states\": [[10, 8, 9, "
        ));
        assert!(line.contains(
            "0, 0, 0, 1]], \"steps\": 2, \"plies\": 1, \"fullmoves\": 1, \"result\": \"1-0\", \"spec\": {"
        ));
        assert!(line.ends_with("}}\n"));
        let example = parse_example_line(&line).unwrap();
        assert_eq!(example.moves, [START, 4955]);
        assert_eq!(example.states, [INITIAL_STATE, INITIAL_STATE]);
        assert!(example.spec_matches);
    }

    #[test]
    fn strings_are_escaped_like_python() {
        let mut out = Vec::new();
        append_json_string(&mut out, "a\"b\\c\n\u{1}é😀\u{7f}");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#""a\"b\\c\n\u0001\u00e9\ud83d\ude00\u007f""#
        );
    }

    #[test]
    fn shape_errors() {
        let mut out = Vec::new();
        assert!(matches!(
            append_example_line(&mut out, "x", &[START], &[], "*"),
            Err(JsonlError::Shape { .. })
        ));
        assert!(out.is_empty());
        assert!(parse_example_line("{").is_err());
        assert!(matches!(
            parse_example_line("{\"example_id\": \"x\"}"),
            Err(JsonlError::Field { .. })
        ));
    }
}
