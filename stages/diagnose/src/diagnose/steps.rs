//! `steps.parquet`: one row per measured step, so that `cwm query` (or any Parquet reader)
//! can slice the diagnostics by game, ply, tier, flag or tag.
//!
//! | column | type | meaning |
//! |---|---|---|
//! | `game_id` | utf8 | the example id |
//! | `t` | uint32 | the step |
//! | `exact` | bool | all 75 labels right (ExactState) |
//! | `tier` | uint8 | how many of E1's tiers V0..V5 pass cumulatively: 0 not even V0, 1 V0, …, 5 V4 (at the last step V4 counts as passed), 6 V5 (exact) |
//! | `flags` | uint32 | validity flags, [`FLAGS`]: python-chess's `Board.status()` bits as python-chess numbers them (1 `NO_WHITE_KING`, 2 `NO_BLACK_KING`, 4 `TOO_MANY_KINGS`, 8 and 16 too many white / black pawns, 32 `PAWNS_ON_BACKRANK`, 64 and 128 too many white / black pieces, 256 `BAD_CASTLING_RIGHTS`, 512 `INVALID_EP_SQUARE`, 1024 `OPPOSITE_CHECK`, 2048 `EMPTY`, 2^15 `TOO_MANY_CHECKERS`, 2^16 `IMPOSSIBLE_CHECK`), 2^20 `TOO_MUCH_MATERIAL` and 2^21 `STEPPER_DOUBLE_CHECK` (shakmaty only), 2^24 en-passant file and rank half set, 2^25 fullmove 0 (the two V0 failures), 2^26 V2 fails, 2^27 V3 fails |
//! | `fields` | uint8 | FieldExact bits: 1 placement, 2 side, 4 castling, 8 en passant, 16 halfmove, 32 fullmove |
//! | `position_exact` | bool | `Key4` (labels 0..=70) right |
//! | `playable` | bool | the prediction is a position shakmaty can play (`rules::playable`) |
//! | `iou`, `precision`, `recall` | float32, null when not playable | legal-move-set agreement with the true position |
//! | `legal_exact` | bool, null when not playable | the legal-move sets are equal |
//! | `piece_iou` | float32, null when not playable | mean IoU of the moves of the true side's pieces |
//! | `next_afforded` | bool, null at the last step | the game's next move is legal in the prediction |
//! | `transition_consistent` | bool, null at t = 0 | the prediction is the previous one with the move played |
//! | `invariants` | uint8 | violated invariants over the previous prediction: bit k−1 for Ik (1..=7); 0 at t = 0 |
//! | `tags` | uint32 | the step's event tags, bit `e` for tag `e` of the summary's `events.tags` order |
//! | `first_error` | bool | the game's first non-exact step |

use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Float32Array, StringArray, UInt8Array, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use cwm_chess::rules::StatusFlags;

use crate::DiagnoseError;
use crate::parquet_file::ParquetFile;

/// Bit of the `flags` column: the en-passant file and rank are not both set or both unset.
pub const FLAG_EP_HALF_SET: u32 = 1 << 24;
/// Bit of the `flags` column: the fullmove number is 0.
pub const FLAG_FULLMOVE_ZERO: u32 = 1 << 25;
/// Bit of the `flags` column: V2 (counter consistency) fails.
pub const FLAG_COUNTERS: u32 = 1 << 26;
/// Bit of the `flags` column: V3 (prefix consistency) fails.
pub const FLAG_PREFIX: u32 = 1 << 27;

/// The documented bits of the `flags` column with their names (python-chess's, lower case),
/// in report order: the 14 python-chess flags, the two V0 failures and the V2 and V3
/// failures. The two shakmaty-only flags have their own summary fields.
pub const FLAGS: [(u32, &str); 18] = [
    (StatusFlags::EMPTY.bits(), "empty"),
    (StatusFlags::NO_WHITE_KING.bits(), "no_white_king"),
    (StatusFlags::NO_BLACK_KING.bits(), "no_black_king"),
    (StatusFlags::TOO_MANY_KINGS.bits(), "too_many_kings"),
    (
        StatusFlags::TOO_MANY_WHITE_PIECES.bits(),
        "too_many_white_pieces",
    ),
    (
        StatusFlags::TOO_MANY_BLACK_PIECES.bits(),
        "too_many_black_pieces",
    ),
    (
        StatusFlags::TOO_MANY_WHITE_PAWNS.bits(),
        "too_many_white_pawns",
    ),
    (
        StatusFlags::TOO_MANY_BLACK_PAWNS.bits(),
        "too_many_black_pawns",
    ),
    (StatusFlags::PAWNS_ON_BACKRANK.bits(), "pawns_on_backrank"),
    (
        StatusFlags::BAD_CASTLING_RIGHTS.bits(),
        "bad_castling_rights",
    ),
    (StatusFlags::INVALID_EP_SQUARE.bits(), "invalid_ep_square"),
    (StatusFlags::OPPOSITE_CHECK.bits(), "opposite_check"),
    (StatusFlags::TOO_MANY_CHECKERS.bits(), "too_many_checkers"),
    (StatusFlags::IMPOSSIBLE_CHECK.bits(), "impossible_check"),
    (FLAG_EP_HALF_SET, "ep_half_set"),
    (FLAG_FULLMOVE_ZERO, "fullmove_zero"),
    (FLAG_COUNTERS, "counters_inconsistent"),
    (FLAG_PREFIX, "prefix_inconsistent"),
];

/// The Arrow schema of `steps.parquet`.
pub fn steps_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("game_id", DataType::Utf8, false),
        Field::new("t", DataType::UInt32, false),
        Field::new("exact", DataType::Boolean, false),
        Field::new("tier", DataType::UInt8, false),
        Field::new("flags", DataType::UInt32, false),
        Field::new("fields", DataType::UInt8, false),
        Field::new("position_exact", DataType::Boolean, false),
        Field::new("playable", DataType::Boolean, false),
        Field::new("iou", DataType::Float32, true),
        Field::new("precision", DataType::Float32, true),
        Field::new("recall", DataType::Float32, true),
        Field::new("legal_exact", DataType::Boolean, true),
        Field::new("piece_iou", DataType::Float32, true),
        Field::new("next_afforded", DataType::Boolean, true),
        Field::new("transition_consistent", DataType::Boolean, true),
        Field::new("invariants", DataType::UInt8, false),
        Field::new("tags", DataType::UInt32, false),
        Field::new("first_error", DataType::Boolean, false),
    ]))
}

/// One row of `steps.parquet` (without the game id, which its [`GameSteps`] holds).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StepRow {
    /// The step.
    pub t: u32,
    /// ExactState.
    pub exact: bool,
    /// Tiers passed cumulatively (0..=6).
    pub tier: u8,
    /// Flag bits.
    pub flags: u32,
    /// FieldExact bits.
    pub fields: u8,
    /// PositionExact.
    pub position_exact: bool,
    /// Whether the prediction is playable.
    pub playable: bool,
    /// Legal-move IoU (when playable).
    pub iou: Option<f32>,
    /// Legal-move precision (when playable).
    pub precision: Option<f32>,
    /// Legal-move recall (when playable).
    pub recall: Option<f32>,
    /// LegalSetExact (when playable).
    pub legal_exact: Option<bool>,
    /// Per-piece IoU (when playable).
    pub piece_iou: Option<f32>,
    /// NextMoveAfforded (t < T).
    pub next_afforded: Option<bool>,
    /// TransitionConsistent (t ≥ 1).
    pub transition_consistent: Option<bool>,
    /// Invariant violation bits.
    pub invariants: u8,
    /// Tag bits.
    pub tags: u32,
    /// The game's first non-exact step.
    pub first_error: bool,
}

/// The rows of one game.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GameSteps {
    /// The example id.
    pub game_id: String,
    /// One row per step.
    pub rows: Vec<StepRow>,
}

/// `steps.parquet` being written under a temporary name, a batch of games at a time.
pub struct StepsWriter(ParquetFile);

impl StepsWriter {
    /// Creates the file (under a temporary name until [`StepsWriter::finish`]).
    ///
    /// # Errors
    /// [`DiagnoseError`] naming the file.
    pub fn create(path: &Path) -> Result<StepsWriter, DiagnoseError> {
        Ok(StepsWriter(ParquetFile::create(path, steps_schema())?))
    }

    /// Appends the rows of `games`, in order.
    ///
    /// # Errors
    /// [`DiagnoseError`] naming the file.
    pub fn append<'a>(
        &mut self,
        games: impl IntoIterator<Item = &'a GameSteps>,
    ) -> Result<(), DiagnoseError> {
        let rows: Vec<(&str, &StepRow)> = games
            .into_iter()
            .flat_map(|g| g.rows.iter().map(move |r| (g.game_id.as_str(), r)))
            .collect();
        if rows.is_empty() {
            return Ok(());
        }
        let column = |f: fn(&StepRow) -> bool| -> ArrayRef {
            Arc::new(BooleanArray::from_iter(
                rows.iter().map(|(_, r)| Some(f(r))),
            ))
        };
        let nullable_bool = |f: fn(&StepRow) -> Option<bool>| -> ArrayRef {
            Arc::new(BooleanArray::from_iter(rows.iter().map(|(_, r)| f(r))))
        };
        let float = |f: fn(&StepRow) -> Option<f32>| -> ArrayRef {
            Arc::new(Float32Array::from_iter(rows.iter().map(|(_, r)| f(r))))
        };
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|(id, _)| id))),
            Arc::new(UInt32Array::from_iter_values(rows.iter().map(|(_, r)| r.t))),
            column(|r| r.exact),
            Arc::new(UInt8Array::from_iter_values(
                rows.iter().map(|(_, r)| r.tier),
            )),
            Arc::new(UInt32Array::from_iter_values(
                rows.iter().map(|(_, r)| r.flags),
            )),
            Arc::new(UInt8Array::from_iter_values(
                rows.iter().map(|(_, r)| r.fields),
            )),
            column(|r| r.position_exact),
            column(|r| r.playable),
            float(|r| r.iou),
            float(|r| r.precision),
            float(|r| r.recall),
            nullable_bool(|r| r.legal_exact),
            float(|r| r.piece_iou),
            nullable_bool(|r| r.next_afforded),
            nullable_bool(|r| r.transition_consistent),
            Arc::new(UInt8Array::from_iter_values(
                rows.iter().map(|(_, r)| r.invariants),
            )),
            Arc::new(UInt32Array::from_iter_values(
                rows.iter().map(|(_, r)| r.tags),
            )),
            column(|r| r.first_error),
        ];
        Ok(self.0.write(columns)?)
    }

    /// Closes the file and gives it its name.
    ///
    /// # Errors
    /// [`DiagnoseError`] naming the file.
    pub fn finish(self) -> Result<(), DiagnoseError> {
        Ok(self.0.finish()?)
    }
}
