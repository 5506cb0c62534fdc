//! stage api (being written)
