//! Every shared PGN goes through the whole replay without panicking; rejections carry reasons.

mod placeholder {}
