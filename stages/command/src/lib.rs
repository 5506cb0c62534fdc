//! command stage (being written)
