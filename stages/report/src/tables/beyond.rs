//! The tables beyond the paper, from `diagnose` artifacts (one table of each kind per split):
//! `beyond_validity_<split>` (E1, with E12's masses), `beyond_fields_<split>` (E2), `beyond_affordance_<split>`
//! (E3, E4), `beyond_events_<split>` and `beyond_first_error_<split>` (E5), `beyond_novelty_<split>` (E7, when the
//! diagnostics were given a novelty artifact) and `beyond_switch_<split>` (E6, when the split holds
//! real-prefix/random-continuation games).
//!
//! Every rate is printed from the diagnose summary as written: a percentage with two decimals,
//! a mean in 0..1 with three, a rate per 1,000 steps with two; `–` where the value is undefined
//! or rests on fewer than 30 steps, games or events; the CSV has the full-precision value.

use std::collections::BTreeSet;

use cwm_formats::diagnose::{
    DiagnoseSummary, FirstErrors, MIN_N, Rate, Ratio, SwitchCurve, TagStats,
};
use cwm_formats::novelty::{NoveltyCell, NoveltyMetrics};

use super::{cell_name, file_safe, paper_rank, sources, split_order};
use crate::inputs::{DiagnoseResult, Inputs};
use crate::table::{Cell, Column, Table};

/// The note every beyond table carries about `–`.
const DASH_NOTE: &str =
    "`–`: not defined, or fewer than 30 steps, games or events behind the value.";

/// Leaves out of `inputs.diagnose` the diagnoses of the evaluations in `dropped` (the floors no
/// selection chose, which the test tables leave out too) and of the models in
/// `dropped_models` (those floors' models, whose evaluations on a split the test tables do not
/// read, such as `test_continuation`, are not among the report's inputs), so that the beyond
/// tables and figures show the same models as the paper's.
pub fn keep_chosen_floor_diagnoses(
    inputs: &mut Inputs,
    dropped: &BTreeSet<String>,
    dropped_models: &BTreeSet<String>,
) {
    let in_set = |hash: &Option<String>, set: &BTreeSet<String>| {
        hash.as_ref().is_some_and(|h| set.contains(h))
    };
    inputs.diagnose.retain(|d| {
        !in_set(&d.summary.evaluate_hash, dropped) && !in_set(&d.summary.model_hash, dropped_models)
    });
}

/// The diagnoses of each split, splits in report order, runs in the paper's order of families
/// then by size (then instance name).
pub fn beyond_runs(inputs: &Inputs) -> Vec<(String, Vec<&DiagnoseResult>)> {
    let splits = split_order(inputs.diagnose.iter().map(|d| d.summary.split.clone()));
    splits
        .into_iter()
        .map(|split| {
            let mut runs: Vec<&DiagnoseResult> = inputs
                .diagnose
                .iter()
                .filter(|d| d.summary.split == split)
                .collect();
            runs.sort_by_key(|d| (paper_rank(d.family), d.size, d.origin.instance.clone()));
            (split, runs)
        })
        .collect()
}

/// Every beyond table, split by split in report order.
pub fn beyond_tables(inputs: &Inputs) -> Vec<Table> {
    let mut tables = Vec::new();
    for (split, runs) in beyond_runs(inputs) {
        tables.push(validity(&split, &runs));
        tables.push(fields(&split, &runs));
        tables.push(affordance(&split, &runs));
        tables.push(events(&split, &runs));
        tables.push(first_error(&split, &runs));
        if runs.iter().any(|d| has_memory(&d.summary)) {
            tables.push(memory(&split, &runs));
        }
        if runs.iter().any(|d| d.summary.novelty.is_some()) {
            tables.push(novelty(&split, &runs));
        }
        if runs.iter().any(|d| !d.summary.since_switch.is_empty()) {
            tables.push(switch(&split, &runs));
        }
    }
    tables
}

/// A table of `kind` on `split` with one row per run, made by `row`.
fn per_run_table(
    kind: &str,
    title: String,
    split: &str,
    runs: &[&DiagnoseResult],
    columns: Vec<Column>,
    row: impl Fn(&DiagnoseSummary) -> Vec<Cell>,
) -> Table {
    let rows = runs
        .iter()
        .map(|d| {
            let mut cells = vec![model_cell(d)];
            cells.extend(row(&d.summary));
            cells
        })
        .collect();
    let mut all = vec![Column::left("Model")];
    all.extend(columns);
    Table {
        id: format!("beyond_{kind}_{}", file_safe(split)),
        label: format!("Beyond: {kind} ({split})"),
        title,
        columns: all,
        rows,
        notes: vec![DASH_NOTE.to_owned()],
        sources: sources(runs.iter().map(|d| &d.origin)),
    }
}

fn model_cell(d: &DiagnoseResult) -> Cell {
    Cell::with_raw(
        cell_name(d.family, d.size),
        format!("{}-{}", d.family.name(), d.size.name()),
    )
}

/// The value of `rate` when it is defined and rests on enough cases.
fn shown(rate: &Rate) -> Option<f64> {
    if rate.low_n { None } else { rate.value }
}

/// A proportion as a percentage.
fn pct(rate: &Rate) -> Cell {
    shown(rate).map_or_else(Cell::missing, |v| {
        Cell::with_raw(format!("{:.2}", v * 100.0), format!("{}", v * 100.0))
    })
}

/// A proportion as a percentage with its 95% interval.
fn pct_ci(rate: &Rate) -> Cell {
    let Some(v) = shown(rate) else {
        return Cell::missing();
    };
    let text = match (rate.lo, rate.hi) {
        (Some(lo), Some(hi)) => format!("{:.2} [{:.2}, {:.2}]", v * 100.0, lo * 100.0, hi * 100.0),
        _ => format!("{:.2}", v * 100.0),
    };
    Cell::with_raw(text, format!("{}", v * 100.0))
}

/// A mean in 0..1 with three decimals.
fn mean(rate: &Rate) -> Cell {
    shown(rate).map_or_else(Cell::missing, |v| {
        Cell::with_raw(format!("{v:.3}"), format!("{v}"))
    })
}

/// A rate already on its own scale (per 1,000 steps) with two decimals.
fn per_thousand(rate: &Rate) -> Cell {
    shown(rate).map_or_else(Cell::missing, |v| {
        Cell::with_raw(format!("{v:.2}"), format!("{v}"))
    })
}

/// A ratio (a lift) with its interval.
fn ratio_ci(ratio: &Ratio) -> Cell {
    let value = if ratio.low_n { None } else { ratio.value };
    let Some(v) = value else {
        return Cell::missing();
    };
    let text = match (ratio.lo, ratio.hi) {
        (Some(lo), Some(hi)) => format!("{v:.2} [{lo:.2}, {hi:.2}]"),
        _ => format!("{v:.2}"),
    };
    Cell::with_raw(text, format!("{v}"))
}

fn count(n: u64) -> Cell {
    Cell::with_raw(crate::format::count(n), n.to_string())
}

fn right(headers: &[&str]) -> Vec<Column> {
    headers.iter().map(|h| Column::right(*h)).collect()
}

/// E1: the tiers V0..V5, the plausible-error share and the most frequent flag among errors;
/// E12: the median true-state mass and the sampled valid and afford masses.
fn validity(split: &str, runs: &[&DiagnoseResult]) -> Table {
    let columns = right(&[
        "Steps",
        "Well-formed (%)",
        "Valid position (%)",
        "Counter-consistent (%)",
        "Prefix-consistent (%)",
        "Affords next move (%)",
        "ExactState (%)",
        "Plausible errors (%)",
        "Games with an invalid state (%)",
        "True-state mass (median)",
        "Valid mass (%)",
        "Afford mass (%)",
    ]);
    let mut columns = columns;
    columns.push(Column::left("Commonest flag among errors"));
    let title = format!(
        "Validity of the predicted states on {split}: the share of steps at each tier (cumulative), \
         and of wrong states that are still valid positions"
    );
    let mut table = per_run_table("validity", title, split, runs, columns, |s| {
        let v = &s.validity;
        let tier = |k: usize| v.tiers.get(k).map_or_else(Cell::missing, pct);
        vec![
            count(s.steps),
            tier(0),
            tier(1),
            tier(2),
            tier(3),
            tier(4),
            tier(5),
            pct_ci(&v.plausible_error_share),
            pct(&v.games_with_v1_failure),
            s.mass.median_true_mass.map_or_else(Cell::missing, |m| {
                Cell::with_raw(format!("{m:.3}"), format!("{m}"))
            }),
            s.mass
                .sampled
                .as_ref()
                .map_or_else(Cell::missing, |m| pct_ci(&m.valid_mass)),
            s.mass
                .sampled
                .as_ref()
                .map_or_else(Cell::missing, |m| pct_ci(&m.afford_mass)),
            commonest_flag(s),
        ]
    });
    table.notes.push(
        "Tiers are cumulative: V0 well-formed labels, V1 a valid position (python-chess 1.11.2 \
         `Board.status()` has no flag), V2 counters consistent with each other, V3 consistent \
         with the ply, V4 the game's next move is legal in the predicted position (over steps \
         that have a next move), V5 exact. Plausible errors: P(valid position | not exact), \
         with a 95% game-level bootstrap interval."
            .to_owned(),
    );
    table.notes.push(mass_note(runs));
    table
}

/// What the mass columns of the validity table are, with the states drawn per step.
fn mass_note(runs: &[&DiagnoseResult]) -> String {
    let samples: BTreeSet<u32> = runs
        .iter()
        .filter_map(|d| d.summary.mass.sampled.as_ref().map(|m| m.samples))
        .collect();
    let drawn = match samples.len() {
        0 => "states drawn from the model's label distributions (none were drawn here)".to_owned(),
        _ => format!(
            "{} states drawn at each sampled step from the model's 75 label distributions, each \
             label on its own",
            samples
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(" or ")
        ),
    };
    format!(
        "Probability mass: the true-state mass of a step is the product of the 75 labels' \
         probabilities of their true class (its median over steps); the valid mass is the mean \
         share of {drawn} that are valid positions (V1), the afford mass the mean share in \
         which the game's next move is legal (over sampled steps with a next move), with 95% \
         game-level bootstrap intervals."
    )
}

/// The flag firing most often among non-exact steps, with its share.
fn commonest_flag(s: &DiagnoseSummary) -> Cell {
    let best = s
        .validity
        .flags_non_exact
        .iter()
        .filter(|f| f.rate.num > 0.0)
        .max_by(|a, b| a.rate.num.total_cmp(&b.rate.num));
    match best {
        Some(flag) => match flag.rate.value {
            Some(v) => Cell::with_raw(
                format!("{} ({:.1}%)", flag.name, v * 100.0),
                flag.name.clone(),
            ),
            None => Cell::text(flag.name.clone()),
        },
        None => Cell::missing(),
    }
}

/// E2: per-field exactness, position-only exactness and piece-level errors.
fn fields(split: &str, runs: &[&DiagnoseResult]) -> Table {
    let columns = right(&[
        "Placement (%)",
        "Side (%)",
        "Castling (%)",
        "En passant (%)",
        "Halfmove (%)",
        "Fullmove (%)",
        "Position exact (%)",
        "ExactState (%)",
        "Counter-only errors (%)",
        "Phantom pieces (%)",
        "Missing pieces (%)",
        "Misidentified pieces (%)",
    ]);
    let title = format!(
        "The FEN fields of the predicted states on {split}: each field exact, the position \
         (first four FEN fields) exact, and piece-level errors over squares"
    );
    let mut table = per_run_table("fields", title, split, runs, columns, |s| {
        let f = &s.fields;
        vec![
            pct(&f.placement),
            pct(&f.side),
            pct(&f.castling),
            pct(&f.en_passant),
            pct(&f.halfmove),
            pct(&f.fullmove),
            pct(&f.position_exact),
            pct(&f.exact_state),
            pct(&f.counter_only_error_share),
            pct(&f.phantom_rate),
            pct(&f.omission_rate),
            pct(&f.misidentification_rate),
        ]
    });
    table.notes.push(
        "Counter-only errors: the share of wrong states whose position is exact (only the \
         halfmove clock or fullmove number is wrong). Phantom: predicted pieces on squares whose \
         true label differs, over predicted pieces; missing: true pieces predicted empty, over \
         true pieces; misidentified: both occupied but different, over true pieces."
            .to_owned(),
    );
    table
}

/// E3 and E4: legal-move agreement, transition consistency, invariants and recovery.
fn affordance(split: &str, runs: &[&DiagnoseResult]) -> Table {
    let columns = right(&[
        "Legal-move IoU (strict)",
        "Legal-move IoU (defined)",
        "Coverage (%)",
        "Precision (strict)",
        "Recall (strict)",
        "Legal set exact (%)",
        "Per-piece IoU (strict)",
        "Silent errors (%)",
        "Next move afforded (%)",
        "Transition consistent (%)",
        "TC after a wrong state (%)",
        "Invariant violations per 1k",
        "Recovery (%)",
        "Mean error run",
    ]);
    let title = format!(
        "Legal moves and dynamics of the predicted states on {split}: agreement of the legal \
         move sets with the true ones, and how predictions follow each other"
    );
    let mut table = per_run_table("affordance", title, split, runs, columns, |s| {
        let (a, d) = (&s.affordance, &s.dynamics);
        vec![
            mean(&a.iou.strict),
            mean(&a.iou.defined),
            pct(&a.coverage),
            mean(&a.precision.strict),
            mean(&a.recall.strict),
            pct(&a.legal_set_exact.strict),
            mean(&a.per_piece_iou.strict),
            pct(&a.silent_error_share),
            pct(&d.next_move_afforded),
            pct(&d.transition_consistent),
            pct(&d.tc_given_prev_wrong),
            invariant_total(s),
            pct(&d.recovery_rate),
            d.error_runs.mean.map_or_else(Cell::missing, |m| {
                Cell::with_raw(format!("{m:.2}"), format!("{m}"))
            }),
        ]
    });
    table.notes.push(
        "Strict means score a step whose predicted state is not a playable position as 0; the \
         defined-only mean leaves it out and the coverage column says how many steps it keeps. \
         Silent errors: wrong states whose legal move set is exactly right. Transition \
         consistent: the previous prediction with the game's move, replayed by the rules, gives \
         this prediction. Invariant violations: I1–I7 of the specification summed, per 1,000 \
         steps (castling rights reappearing, piece or pawn counts rising, side or counters \
         stepping wrongly, squares away from the move changing). Recovery: P(exact at t+1 | wrong \
         at t)."
            .to_owned(),
    );
    table
}

/// I1–I7 summed, per 1,000 steps.
fn invariant_total(s: &DiagnoseSummary) -> Cell {
    let invariants = &s.dynamics.invariants;
    let Some(first) = invariants.first() else {
        return Cell::missing();
    };
    let num: f64 = invariants.iter().map(|i| i.violations.num).sum();
    let total = Rate {
        num,
        value: first
            .violations
            .value
            .map(|_| num * f64::from(first.violations.scale) / first.violations.n as f64),
        lo: None,
        hi: None,
        ..first.violations
    };
    per_thousand(&total)
}

/// E5: one row per model and event tag.
fn events(split: &str, runs: &[&DiagnoseResult]) -> Table {
    let mut columns = vec![Column::left("Model"), Column::left("Event")];
    columns.extend(right(&[
        "n",
        "Per 1k plies",
        "ExactState at the event (%)",
        "Relevant labels (%)",
        "ExactState at t+1 (%)",
        "ExactState at t+5 (%)",
        "Lift",
        "First-error share (%)",
        "First-error lift",
        "Promoted piece later (%)",
    ]));
    let mut rows = Vec::new();
    for d in runs {
        for tag in &d.summary.events.tags {
            rows.push(event_row(d, tag));
        }
    }
    Table {
        id: format!("beyond_events_{}", file_safe(split)),
        label: format!("Beyond: events ({split})"),
        title: format!(
            "Rare events on {split}: how often each rule event occurs and how the models fare at \
             it, after it, and at their first error"
        ),
        columns,
        rows,
        notes: vec![
            DASH_NOTE.to_owned(),
            "ExactState at the event with a 95% game-level bootstrap interval. Lift: the error \
             rate at tagged steps over the error rate at untagged steps of the same 20-ply bin, \
             weighted by the tagged steps' bins (1 = no harder than usual). First-error share: \
             of the games' first wrong steps, the share carrying the tag; its lift divides by \
             the tag's base rate in the same bins. Promoted piece later: for the promotion \
             tags, how often the square of a piece promoted to that piece is right at every step \
             it stands there (the promotion step included)."
                .to_owned(),
        ],
        sources: sources(runs.iter().map(|d| &d.origin)),
    }
}

fn event_row(d: &DiagnoseResult, tag: &TagStats) -> Vec<Cell> {
    let first = d
        .summary
        .events
        .first_errors
        .tags
        .iter()
        .find(|f| f.tag == tag.tag);
    let after = |i: usize| tag.aftershock.get(i).map_or_else(Cell::missing, pct);
    vec![
        model_cell(d),
        Cell::text(tag.tag.clone()),
        count(tag.n),
        per_thousand(&tag.per_1000),
        pct_ci(&tag.exact_state),
        pct(&tag.relevant_accuracy),
        after(0),
        after(4),
        ratio_ci(&tag.lift),
        first.map_or_else(Cell::missing, |f| pct(&f.share)),
        first.map_or_else(Cell::missing, |f| ratio_ci(&f.lift)),
        promoted_later(&d.summary, &tag.tag),
    ]
}

/// The identity accuracy of the pieces a promotion tag makes; `–` for the other tags.
fn promoted_later(s: &DiagnoseSummary, tag: &str) -> Cell {
    let piece = match tag {
        "promo_q" => "queen",
        "underpromo_r" => "rook",
        "underpromo_b" => "bishop",
        "underpromo_n" => "knight",
        _ => return Cell::missing(),
    };
    s.events
        .promoted_identity
        .iter()
        .find(|p| p.name == piece)
        .map_or_else(Cell::missing, |p| pct(&p.rate))
}

/// Whether the summary has the long-range memory measures (older ones lack two of them).
fn has_memory(s: &DiagnoseSummary) -> bool {
    !s.events.staleness.is_empty() || !s.events.castling_since_lost.is_empty()
}

/// The bins of plies the memory table's columns show, as the summaries name them.
const MEMORY_BINS: [&str; 6] = ["0", "1-9", "10-49", "50-99", "100-199", ">=200"];

/// E5's long-range memory: per model, square accuracy by staleness and castling-label accuracy
/// by plies since the right was lost.
fn memory(split: &str, runs: &[&DiagnoseResult]) -> Table {
    let mut columns = vec![Column::left("Model"), Column::left("Label")];
    let headers: Vec<String> = MEMORY_BINS
        .iter()
        .map(|b| format!("{} plies (%)", b.replace(">=", "≥ ")))
        .collect();
    columns.extend(headers.iter().map(|h| Column::right(h.as_str())));
    let mut rows = Vec::new();
    for d in runs {
        let kinds = [
            (
                "square, since its label changed",
                &d.summary.events.staleness,
            ),
            (
                "lost castling right, since lost",
                &d.summary.events.castling_since_lost,
            ),
        ];
        for (label, bins) in kinds {
            let mut row = vec![model_cell(d), Cell::text(label)];
            row.extend(MEMORY_BINS.iter().map(|name| {
                bins.iter()
                    .find(|b| b.name == *name)
                    .map_or_else(Cell::missing, |b| pct(&b.rate))
            }));
            rows.push(row);
        }
    }
    Table {
        id: format!("beyond_memory_{}", file_safe(split)),
        label: format!("Beyond: memory ({split})"),
        title: format!(
            "Long-range memory on {split}: label accuracy by how many plies ago the true label \
             last changed"
        ),
        columns,
        rows,
        notes: vec![
            DASH_NOTE.to_owned(),
            "Square: each of the 64 square labels at every step, by the plies since its true \
             label last changed (0 at the start). Lost castling right: each castling label \
             after its right was lost (the four rights pooled), by the plies since the step \
             that lost it; right means the model no longer grants the right. 95% intervals are \
             in the diagnose summaries."
                .to_owned(),
        ],
        sources: sources(runs.iter().map(|d| &d.origin)),
    }
}

/// How many events the first-error table names per model.
const TOP_FIRST_ERROR_EVENTS: usize = 3;

/// E5's first-error attribution: per model, the games with an error, which fields are wrong
/// at each game's first error, and the events most over-represented there.
fn first_error(split: &str, runs: &[&DiagnoseResult]) -> Table {
    let mut columns = right(&[
        "Games with an error",
        "Placement wrong (%)",
        "Side wrong (%)",
        "Castling wrong (%)",
        "En passant wrong (%)",
        "Halfmove wrong (%)",
        "Fullmove wrong (%)",
    ]);
    columns.push(Column::left("Events most over-represented"));
    let title = format!(
        "First errors on {split}: at each game's first wrong state, which fields are wrong and \
         which rule events it falls on more often than steps of the same prefix bins do"
    );
    let mut table = per_run_table("first_error", title, split, runs, columns, |s| {
        let first = &s.events.first_errors;
        let group = |name: &str| {
            first
                .groups_wrong
                .iter()
                .find(|g| g.name == name)
                .map_or_else(Cell::missing, |g| pct(&g.rate))
        };
        vec![
            count(first.n),
            group("placement"),
            group("side"),
            group("castling"),
            group("en_passant"),
            group("halfmove"),
            group("fullmove"),
            over_represented(first),
        ]
    });
    table.notes.push(format!(
        "A game's first error is its first step whose predicted state is not exact. A field is \
         wrong when any of its labels is; several can be wrong at once. Events: the (at most \
         {TOP_FIRST_ERROR_EVENTS}) tags with a first-error lift above 1 and at least 30 first \
         errors, largest lift first, as `tag lift`; the lift is the tag's share of first errors \
         over its share of all steps in the same prefix bins. The events table gives every \
         tag's share and lift with intervals."
    ));
    table
}

/// The tags with the largest first-error lift above 1 that rest on enough first errors.
fn over_represented(first: &FirstErrors) -> Cell {
    let mut lifted: Vec<(&str, f64)> = first
        .tags
        .iter()
        .filter(|t| !t.lift.low_n)
        .filter_map(|t| t.lift.value.map(|v| (t.tag.as_str(), v)))
        .filter(|(_, v)| *v > 1.0)
        .collect();
    lifted.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    lifted.truncate(TOP_FIRST_ERROR_EVENTS);
    if lifted.is_empty() {
        return Cell::missing();
    }
    let text: Vec<String> = lifted.iter().map(|(t, v)| format!("{t} {v:.2}")).collect();
    let raw: Vec<String> = lifted.iter().map(|(t, v)| format!("{t} {v}")).collect();
    Cell::with_raw(text.join(", "), raw.join("; "))
}

/// E7: coverage of the test steps by the training split, and ExactState seen vs novel.
fn novelty(split: &str, runs: &[&DiagnoseResult]) -> Table {
    let columns = right(&[
        "Steps",
        "Prefix seen (%)",
        "Position seen (%)",
        "State seen (%)",
        "ExactState, prefix seen (%)",
        "ExactState, position seen (%)",
        "ExactState, novel position (%)",
        "Seen − novel gap (points)",
    ]);
    let title = format!(
        "Seen and novel steps on {split}: how much of the test games the training games \
         contain, and ExactState on seen and novel positions"
    );
    let mut table = per_run_table("novelty", title, split, runs, columns, |s| {
        let Some(m) = &s.novelty else {
            return vec![Cell::missing(); 8];
        };
        let share = |v: Option<f64>| {
            v.map_or_else(Cell::missing, |v| {
                Cell::with_raw(format!("{:.2}", v * 100.0), format!("{}", v * 100.0))
            })
        };
        vec![
            count(m.steps),
            share(m.prefix_seen_share),
            share(m.position_seen_share),
            share(m.state_seen_share),
            stratum_exact(m, |b| &b.prefix_seen),
            stratum_exact(m, |b| &b.position_seen),
            stratum_exact(m, |b| &b.novel),
            m.seen_novel_gap.map_or_else(Cell::missing, |g| {
                Cell::with_raw(format!("{:+.2}", g * 100.0), format!("{}", g * 100.0))
            }),
        ]
    });
    table.notes.push(
        "Seen: the step's move prefix, position (FIDE identity) or full 75-label state occurs \
         in the training split the model was trained on. Position seen: prefix unseen but \
         position seen. The gap compares ExactState on seen and novel positions within each \
         20-ply bin, weighted by the novel steps per bin, so that early (mostly seen) steps do \
         not make it."
            .to_owned(),
    );
    table
}

/// The ranges of plies since the switch that the switch table sums its bins into: the real
/// prefix, then 0–9, 10–49, 50–99 and 100 on after the switch.
const SWITCH_RANGES: [(&str, i64, i64); 5] = [
    ("Real prefix (%)", i64::MIN, 0),
    ("0–9 after (%)", 0, 10),
    ("10–49 after (%)", 10, 50),
    ("50–99 after (%)", 50, 100),
    ("100+ after (%)", 100, i64::MAX),
];

/// E6: ExactState on the real prefix and in ranges of plies since the switch, one row per
/// model and switch ply.
fn switch(split: &str, runs: &[&DiagnoseResult]) -> Table {
    let mut columns = vec![Column::left("Model"), Column::right("Switch ply k")];
    columns.push(Column::right("Games"));
    columns.extend(
        SWITCH_RANGES
            .iter()
            .map(|(header, _, _)| Column::right(*header)),
    );
    let rows = runs
        .iter()
        .flat_map(|d| {
            d.summary.since_switch.iter().map(move |curve| {
                let mut row = vec![model_cell(d), count(u64::from(curve.prefix_plies))];
                row.push(count(curve.games));
                row.extend(
                    SWITCH_RANGES
                        .iter()
                        .map(|&(_, lo, hi)| switch_range(curve, lo, hi)),
                );
                row
            })
        })
        .collect();
    Table {
        id: format!("beyond_switch_{}", file_safe(split)),
        label: format!("Beyond: switch ({split})"),
        title: format!(
            "ExactState on {split}, real games continued with random legal moves after ply k: on \
             the real prefix and by plies since the switch"
        ),
        columns,
        rows,
        notes: vec![
            DASH_NOTE.to_owned(),
            "Each real test game is kept for its first k plies and then played on with uniformly \
             random legal moves until the game ends (the random_continuation stage); a step t \
             lies t − k plies after the switch. ExactState over the steps of each range, all \
             games continued after k together."
                .to_owned(),
        ],
        sources: sources(runs.iter().map(|d| &d.origin)),
    }
}

/// ExactState over the bins of `curve` that lie in `lo <= t − k < hi`.
fn switch_range(curve: &SwitchCurve, lo: i64, hi: i64) -> Cell {
    let (n, exact) = curve
        .bins
        .iter()
        .filter(|b| b.start >= lo && b.end <= hi)
        .fold((0u64, 0u64), |(n, e), b| (n + b.n, e + b.exact));
    if n < MIN_N {
        return Cell::missing();
    }
    let v = exact as f64 / n as f64;
    Cell::with_raw(format!("{:.2}", v * 100.0), format!("{}", v * 100.0))
}

/// ExactState over one stratum, all ply bins together.
fn stratum_exact(
    m: &NoveltyMetrics,
    cell: impl Fn(&cwm_formats::novelty::NoveltyPlyBin) -> &NoveltyCell,
) -> Cell {
    let (n, exact) = m
        .by_ply
        .iter()
        .map(&cell)
        .fold((0u64, 0u64), |(n, e), c| (n + c.n, e + c.exact));
    if n < MIN_N {
        return Cell::missing();
    }
    let v = exact as f64 / n as f64;
    Cell::with_raw(format!("{:.2}", v * 100.0), format!("{}", v * 100.0))
}

#[cfg(test)]
mod tests {
    use cwm_models::{Family, Size};

    use super::*;
    use crate::inputs::Origin;

    /// A real diagnose summary: the default pipeline's SLiCE on its real test games.
    const SUMMARY: &str = include_str!("../../testdata/diagnose_summary.json");

    fn result(family: Family, split: &str, evaluate_hash: &str) -> DiagnoseResult {
        let mut summary: DiagnoseSummary = serde_json::from_str(SUMMARY).unwrap();
        summary.split = split.to_owned();
        summary.evaluate_hash = Some(evaluate_hash.to_owned());
        DiagnoseResult {
            origin: Origin {
                instance: format!("diagnose[{}]", family.name()),
                kind: "diagnose".into(),
                hash: format!("d-{evaluate_hash}"),
            },
            family,
            size: Size::D128,
            summary,
        }
    }

    fn inputs(results: Vec<DiagnoseResult>) -> Inputs {
        Inputs {
            diagnose: results,
            ..Inputs::default()
        }
    }

    fn column(table: &Table, header: &str) -> usize {
        table
            .columns
            .iter()
            .position(|c| c.header == header)
            .unwrap_or_else(|| panic!("no column {header:?} in {}", table.id))
    }

    #[test]
    fn every_split_gets_each_table_with_a_row_per_model_in_paper_order() {
        let inputs = inputs(vec![
            result(Family::Slice, "test_random", "e1"),
            result(Family::Transformer, "test_random", "e2"),
            result(Family::Transformer, "test_real", "e3"),
        ]);
        let tables = beyond_tables(&inputs);
        let ids: Vec<&str> = tables.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "beyond_validity_test_real",
                "beyond_fields_test_real",
                "beyond_affordance_test_real",
                "beyond_events_test_real",
                "beyond_first_error_test_real",
                "beyond_memory_test_real",
                "beyond_novelty_test_real",
                "beyond_validity_test_random",
                "beyond_fields_test_random",
                "beyond_affordance_test_random",
                "beyond_events_test_random",
                "beyond_first_error_test_random",
                "beyond_memory_test_random",
                "beyond_novelty_test_random",
            ]
        );
        for table in &tables {
            for row in &table.rows {
                assert_eq!(row.len(), table.columns.len(), "{}", table.id);
            }
        }
        let validity = &tables[7];
        let models: Vec<&str> = validity.rows.iter().map(|r| r[0].text.as_str()).collect();
        assert_eq!(models, ["Transformer d128/l1", "SLiCE d128/l1"]);
        let tags = inputs.diagnose[0].summary.events.tags.len();
        assert_eq!(
            tables[10].rows.len(),
            2 * tags,
            "one events row per model and tag"
        );
        assert_eq!(tables[12].rows.len(), 2 * 2, "two memory rows per model");
    }

    #[test]
    fn rates_print_as_written_and_low_n_as_a_dash() {
        let mut run = result(Family::Transformer, "test_random", "e1");
        let tables = beyond_tables(&inputs(vec![run.clone()]));
        let validity = &tables[0];
        let v1 = column(validity, "Valid position (%)");
        let tier = run.summary.validity.tiers[1].value.unwrap();
        assert_eq!(validity.rows[0][v1].text, format!("{:.2}", tier * 100.0));
        assert_eq!(validity.rows[0][v1].raw, Some(format!("{}", tier * 100.0)));

        run.summary.validity.tiers[1].low_n = true;
        run.summary.validity.tiers[2].value = None;
        let tables = beyond_tables(&inputs(vec![run]));
        let row = &tables[0].rows[0];
        assert_eq!(row[v1].text, "–");
        assert_eq!(row[v1].raw.as_deref(), Some(""));
        assert_eq!(row[column(&tables[0], "Counter-consistent (%)")].text, "–");
    }

    #[test]
    fn the_mass_columns_print_the_sampled_means_with_their_intervals() {
        let mut run = result(Family::Transformer, "test_random", "e1");
        run.summary.mass.sampled = None;
        let without = beyond_tables(&inputs(vec![run.clone()]));
        let valid = column(&without[0], "Valid mass (%)");
        let afford = column(&without[0], "Afford mass (%)");
        assert_eq!(without[0].rows[0][valid].text, "–");
        assert_eq!(without[0].rows[0][afford].text, "–");
        assert!(without[0].notes[2].contains("none were drawn"));

        let rate = |num: f64, n: u64| Rate {
            num,
            n,
            value: Some(num / n as f64),
            lo: Some(0.5),
            hi: Some(0.75),
            interval: cwm_formats::diagnose::Interval::Bootstrap,
            low_n: false,
            scale: 1,
        };
        run.summary.mass.sampled = Some(cwm_formats::diagnose::SampledMass {
            samples: 64,
            steps: 200,
            valid_mass: rate(125.0, 200),
            afford_mass: rate(99.0, 198),
            valid_mass_histogram: vec![10; 20],
        });
        let with = beyond_tables(&inputs(vec![run.clone()]));
        let row = &with[0].rows[0];
        assert_eq!(row[valid].text, "62.50 [50.00, 75.00]");
        assert_eq!(row[afford].text, "50.00 [50.00, 75.00]");
        assert!(
            with[0].notes[2].contains("64 states"),
            "{}",
            with[0].notes[2]
        );
        let median = column(&with[0], "True-state mass (median)");
        let expected = run.summary.mass.median_true_mass.unwrap();
        assert_eq!(row[median].text, format!("{expected:.3}"));
    }

    #[test]
    fn the_switch_table_sums_bins_into_its_ranges_and_needs_continuations() {
        let mut run = result(Family::Transformer, "test_continuation", "e1");
        run.summary.since_switch.clear();
        let tables = beyond_tables(&inputs(vec![run.clone()]));
        assert!(tables.iter().all(|t| !t.id.starts_with("beyond_switch")));
        let bin = |start: i64, n: u64, exact: u64| cwm_formats::diagnose::SwitchBin {
            start,
            end: start + 10,
            n,
            exact,
            exact_state: Some(exact as f64 / n as f64),
        };
        run.summary.since_switch = vec![SwitchCurve {
            prefix_plies: 20,
            games: 4,
            bins: vec![
                bin(-20, 40, 40),
                bin(-10, 40, 30),
                bin(0, 40, 10),
                bin(10, 20, 5),
                bin(40, 20, 0),
            ],
        }];
        let tables = beyond_tables(&inputs(vec![run]));
        let table = tables
            .iter()
            .find(|t| t.id == "beyond_switch_test_continuation")
            .unwrap();
        let row = &table.rows[0];
        let cell = |header: &str| row[column(table, header)].text.clone();
        assert_eq!(cell("Switch ply k"), "20");
        assert_eq!(cell("Games"), "4");
        assert_eq!(cell("Real prefix (%)"), "87.50");
        assert_eq!(cell("0–9 after (%)"), "25.00");
        assert_eq!(cell("10–49 after (%)"), "12.50", "40 steps, 5 exact");
        assert_eq!(cell("50–99 after (%)"), "–", "no steps");
    }

    #[test]
    fn the_novelty_table_needs_a_run_with_novelty_metrics() {
        let mut run = result(Family::Transformer, "test_random", "e1");
        run.summary.novelty = None;
        let tables = beyond_tables(&inputs(vec![run]));
        assert!(tables.iter().all(|t| !t.id.starts_with("beyond_novelty")));
        assert_eq!(tables.len(), 6);
        assert!(beyond_tables(&Inputs::default()).is_empty());
    }

    #[test]
    fn diagnoses_of_dropped_floors_are_left_out() {
        let mut continued = result(Family::Gdn, "test_continuation", "not-an-input");
        continued.summary.model_hash = Some("dropped-model".to_owned());
        let mut inputs = inputs(vec![
            result(Family::Transformer, "test_real", "kept"),
            result(Family::Slice, "test_real", "dropped"),
            continued,
            result(Family::Gdn, "test_continuation", "kept-too"),
        ]);
        keep_chosen_floor_diagnoses(
            &mut inputs,
            &BTreeSet::from(["dropped".to_owned()]),
            &BTreeSet::from(["dropped-model".to_owned()]),
        );
        let runs = beyond_runs(&inputs);
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].1.len(), 1);
        assert_eq!(runs[0].1[0].family, Family::Transformer);
        let continuation: Vec<&str> = runs[1].1.iter().map(|d| d.origin.hash.as_str()).collect();
        assert_eq!(continuation, ["d-kept-too"], "by the model's hash");
    }

    #[test]
    fn invariant_violations_are_summed_on_their_scale() {
        let mut run = result(Family::Transformer, "test_random", "e1");
        for (i, inv) in run.summary.dynamics.invariants.iter_mut().enumerate() {
            inv.violations.num = i as f64;
            inv.violations.n = 2000;
            inv.violations.scale = 1000;
            inv.violations.value = Some(i as f64 / 2.0);
            inv.violations.low_n = false;
        }
        let sum: f64 = (0..run.summary.dynamics.invariants.len())
            .map(|i| i as f64)
            .sum();
        let cell = invariant_total(&run.summary);
        assert_eq!(cell.raw, Some(format!("{}", sum * 1000.0 / 2000.0)));
    }

    fn lifted(first: &mut FirstErrors, tag: &str, value: Option<f64>, low_n: bool) {
        let t = first.tags.iter_mut().find(|t| t.tag == tag).unwrap();
        t.lift.value = value;
        t.lift.low_n = low_n;
    }

    #[test]
    fn first_errors_name_the_largest_lifts_above_one() {
        let mut run = result(Family::Transformer, "test_random", "e1");
        let first = &mut run.summary.events.first_errors;
        for t in &mut first.tags {
            t.lift.value = Some(0.5);
            t.lift.low_n = false;
        }
        assert_eq!(over_represented(first).text, "–", "no lift above 1");
        lifted(first, "capture", Some(1.5), false);
        lifted(first, "check", Some(3.0), false);
        lifted(first, "promo_q", Some(9.0), true);
        lifted(first, "double_push", Some(2.0), false);
        lifted(first, "halfmove_reset", Some(1.2), false);
        lifted(first, "mate", None, false);
        assert_eq!(
            over_represented(first).text,
            "check 3.00, double_push 2.00, capture 1.50"
        );
        let first = first.clone();
        let tables = beyond_tables(&inputs(vec![run]));
        let table = tables
            .iter()
            .find(|t| t.id == "beyond_first_error_test_random")
            .unwrap();
        let row = &table.rows[0];
        assert_eq!(row[1].text, crate::format::count(first.n));
        let placement = &first.groups_wrong[0].rate;
        assert_eq!(
            row[2].raw,
            Some(format!("{}", placement.value.unwrap() * 100.0))
        );
        assert!(
            !table.csv().contains("check 3.00"),
            "the CSV keeps full precision"
        );
        assert!(table.csv().contains("check 3; double_push 2; capture 1.5"));
    }

    #[test]
    fn memory_rows_read_the_bins_by_name_and_promotions_their_piece() {
        let mut run = result(Family::Transformer, "test_random", "e1");
        let events = &mut run.summary.events;
        events.castling_since_lost = events.staleness.clone();
        events.castling_since_lost.reverse();
        events.castling_since_lost[0].rate.value = Some(0.25);
        events.castling_since_lost[0].rate.low_n = false;
        events.promoted_identity = events.staleness[..4].to_vec();
        events.promoted_identity[3].name = "knight".into();
        events.promoted_identity[3].rate.value = Some(0.5);
        events.promoted_identity[3].rate.low_n = false;
        let tables = beyond_tables(&inputs(vec![run]));
        let memory = tables
            .iter()
            .find(|t| t.id.starts_with("beyond_memory"))
            .unwrap();
        let castling = &memory.rows[1];
        assert_eq!(castling[1].text, "lost castling right, since lost");
        let last = column(memory, "≥ 200 plies (%)");
        assert_eq!(castling[last].text, "25.00", "found by name, not position");
        let events = tables
            .iter()
            .find(|t| t.id.starts_with("beyond_events"))
            .unwrap();
        let later = column(events, "Promoted piece later (%)");
        let row = |tag: &str| events.rows.iter().find(|r| r[1].text == tag).unwrap();
        assert_eq!(row("underpromo_n")[later].text, "50.00");
        assert_eq!(row("underpromo_r")[later].text, "–", "no rook entry");
        assert_eq!(row("capture")[later].text, "–");
    }

    #[test]
    fn summaries_without_memory_measures_get_no_memory_table() {
        let mut run = result(Family::Transformer, "test_random", "e1");
        run.summary.events.staleness.clear();
        run.summary.events.castling_since_lost.clear();
        let tables = beyond_tables(&inputs(vec![run]));
        assert!(tables.iter().all(|t| !t.id.starts_with("beyond_memory")));
    }
}
