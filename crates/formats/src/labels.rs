//! The 75 state labels every step is encoded as (spec A.2) and the order their classes take in
//! a model's 1,878 output logits (spec A.3): the one declaration the chess encoding
//! (`cwm-chess`) and the models (`cwm-models`) both use.
//!
//! | labels | group | classes |
//! |---|---|---|
//! | 0..63 | `pieces`: the piece on each square, a8, b8, …, h1 | 13 |
//! | 64 | `side`: side to move | 2 |
//! | 65..68 | `castle`: castling rights K, Q, k, q | 2 |
//! | 69 | `ep_file`: en-passant file (0 none, 1..8 = a..h) | 9 |
//! | 70 | `ep_rank`: en-passant rank (0 none, 1 = rank 3, 2 = rank 6) | 3 |
//! | 71, 72 | `halfmove`: halfmove clock, high then low byte | 256 |
//! | 73, 74 | `fullmove`: fullmove number, high then low byte | 256 |
//!
//! Labels are laid out in the head in label order, each taking as many logits as it has
//! classes, so a group's offsets follow from the groups before it.

/// Labels sharing a class count that sit side by side in the targets and in the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LabelGroup {
    /// Name of the group, as in the reference's output dictionary.
    pub name: &'static str,
    /// Index of the group's first logit in the head's output.
    pub logit_offset: usize,
    /// Index of the group's first label in the 75 targets.
    pub first_label: usize,
    /// Number of labels in the group.
    pub n_labels: usize,
    /// Classes per label.
    pub n_classes: usize,
    /// What the group encodes, in words (the report's Table 2 prints it).
    pub title: &'static str,
    /// How its classes encode it.
    pub encoding: &'static str,
}

impl LabelGroup {
    /// Number of logits the group occupies.
    pub const fn n_logits(&self) -> usize {
        self.n_labels * self.n_classes
    }

    /// The group of `n_labels` labels of `n_classes` classes that follows `self`.
    const fn then(&self, name: &'static str, n_labels: usize, n_classes: usize) -> LabelGroup {
        LabelGroup {
            name,
            logit_offset: self.logit_offset + self.n_logits(),
            first_label: self.first_label + self.n_labels,
            n_labels,
            n_classes,
            title: "",
            encoding: "",
        }
    }

    /// The same group with its description.
    const fn described(self, title: &'static str, encoding: &'static str) -> LabelGroup {
        LabelGroup {
            title,
            encoding,
            ..self
        }
    }
}

/// The piece on each square, a8..h1: 0 empty, 1..6 white P N B R Q K, 7..12 black p n b r q k.
pub const PIECES: LabelGroup = LabelGroup {
    name: "pieces",
    logit_offset: 0,
    first_label: 0,
    n_labels: 64,
    n_classes: 13,
    title: "Board squares",
    encoding: "the piece on each square a8, b8, …, h1: empty, or one of 6 white and 6 black pieces",
};
/// Side to move: 0 white, 1 black.
pub const SIDE: LabelGroup = PIECES
    .then("side", 1, 2)
    .described("Side to move", "white or black");
/// Castling rights K, Q, k, q: 0 or 1 each.
pub const CASTLE: LabelGroup = SIDE
    .then("castle", 4, 2)
    .described("Castling rights", "one yes/no label each for K, Q, k and q");
/// En-passant file: 0 none, 1..8 = a..h.
pub const EP_FILE: LabelGroup = CASTLE
    .then("ep_file", 1, 9)
    .described("En passant file", "none, or the file a–h");
/// En-passant rank: 0 none, 1 = rank 3, 2 = rank 6.
pub const EP_RANK: LabelGroup = EP_FILE
    .then("ep_rank", 1, 3)
    .described("En passant rank", "none, rank 3 or rank 6");
/// Halfmove clock clamped to 0..=65535, high byte then low byte.
pub const HALFMOVE: LabelGroup = EP_RANK.then("halfmove", 2, 256).described(
    "Halfmove clock",
    "an unsigned 16-bit count (clamped), high byte then low byte",
);
/// Fullmove number clamped to 0..=65535, high byte then low byte.
pub const FULLMOVE: LabelGroup = HALFMOVE.then("fullmove", 2, 256).described(
    "Fullmove number",
    "an unsigned 16-bit count (clamped), high byte then low byte",
);

/// The seven groups in label (and head) order. Label `first_label + r` owns logits
/// `logit_offset + r·n_classes .. + n_classes`.
pub const LABEL_GROUPS: [LabelGroup; 7] =
    [PIECES, SIDE, CASTLE, EP_FILE, EP_RANK, HALFMOVE, FULLMOVE];

/// Number of labels per step.
pub const N_LABELS: usize = FULLMOVE.first_label + FULLMOVE.n_labels;

/// Width of the output head: the labels' class counts summed.
pub const HEAD_OUT: usize = FULLMOVE.logit_offset + FULLMOVE.n_logits();

/// Number of classes of each label, in label order.
pub const LABEL_CLASSES: [u16; N_LABELS] = {
    let mut classes = [0u16; N_LABELS];
    let mut g = 0;
    while g < LABEL_GROUPS.len() {
        let group = LABEL_GROUPS[g];
        let mut r = 0;
        while r < group.n_labels {
            classes[group.first_label + r] = group.n_classes as u16;
            r += 1;
        }
        g += 1;
    }
    classes
};

#[cfg(test)]
mod tests {
    use super::*;

    /// The counts of reference-spec A.2 and the offsets of A.3.
    #[test]
    fn the_75_labels_have_the_reference_class_counts() {
        assert_eq!(N_LABELS, 75);
        assert_eq!(HEAD_OUT, 1878);
        let mut expected = vec![13u16; 64];
        expected.push(2); // side to move
        expected.extend([2, 2, 2, 2]); // K Q k q
        expected.extend([9, 3]); // en-passant file, rank
        expected.extend([256, 256, 256, 256]); // halfmove hi lo, fullmove hi lo
        assert_eq!(LABEL_CLASSES.to_vec(), expected);
        assert_eq!(
            LABEL_CLASSES.iter().map(|&c| usize::from(c)).sum::<usize>(),
            HEAD_OUT
        );
        let layout: Vec<(&str, usize, usize)> = LABEL_GROUPS
            .iter()
            .map(|g| (g.name, g.first_label, g.logit_offset))
            .collect();
        assert!(
            LABEL_GROUPS
                .iter()
                .all(|g| !g.title.is_empty() && !g.encoding.is_empty())
        );
        assert_eq!(
            layout,
            [
                ("pieces", 0, 0),
                ("side", 64, 832),
                ("castle", 65, 834),
                ("ep_file", 69, 842),
                ("ep_rank", 70, 851),
                ("halfmove", 71, 854),
                ("fullmove", 73, 1366),
            ]
        );
    }
}
