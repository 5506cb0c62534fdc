//! Cross-check of every label against python-chess.

mod placeholder {}
