//! Example ids (spec E.3): keyed HMAC ids for real games, a documented unkeyed fallback, and the
//! counter ids of random games.
//!
//! * Real game, with a key: `"cwm_" + hex(HMAC-SHA256(key, site))[..24]`, where the key is the
//!   UTF-8 bytes of the key string as given (not hex-decoded) and `site` is the Site header with
//!   surrounding whitespace removed as Python's `str.strip()` does.
//! * Real game, no key: `"cwm_sha256_" + hex(SHA-256(site))[..24]`. The longer prefix keeps these
//!   ids apart from keyed ones; they are stable across runs but anyone can recompute them from the
//!   Site URL, so they hide nothing.
//! * Random game: `"cwm_random_" + counter` zero-padded to five digits, the counter counting every
//!   generated game, kept or not.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// Prefix of keyed real-game ids.
pub const KEYED_PREFIX: &str = "cwm_";
/// Prefix of unkeyed real-game ids.
pub const UNKEYED_PREFIX: &str = "cwm_sha256_";
/// Prefix of random-game ids.
pub const RANDOM_PREFIX: &str = "cwm_random_";
/// Number of hex digits of the digest kept in a real-game id.
pub const DIGEST_HEX_LEN: usize = 24;

/// The secret that keys real-game ids: the UTF-8 bytes of a key string, used as-is.
#[derive(Clone)]
pub struct IdKey(Vec<u8>);

impl IdKey {
    /// Wraps a key string (for example the value of `CHESS_WORLD_MODEL_ID_KEY`). The string's
    /// UTF-8 bytes are the HMAC key; it is not hex-decoded or trimmed.
    pub fn new(key: &str) -> IdKey {
        IdKey(key.as_bytes().to_vec())
    }
}

impl fmt::Debug for IdKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the secret.
        f.write_str("IdKey(<redacted>)")
    }
}

/// Makes real-game ids from Site headers, keyed or not. Cheap to clone and share between
/// threads; the HMAC key schedule is computed once.
#[derive(Clone, Debug)]
pub struct RealGameIds {
    keyed: Option<Hmac<Sha256>>,
}

impl RealGameIds {
    /// Ids keyed with `key` (spec E.3), or the unkeyed fallback when `key` is `None`.
    pub fn new(key: Option<&IdKey>) -> RealGameIds {
        // HMAC accepts keys of every length, so `new_from_slice` cannot fail here; the `ok()`
        // only avoids an unwrap.
        let keyed = key.and_then(|key| Hmac::<Sha256>::new_from_slice(&key.0).ok());
        RealGameIds { keyed }
    }

    /// Whether these ids are keyed.
    pub fn is_keyed(&self) -> bool {
        self.keyed.is_some()
    }

    /// The id of the game with this Site header.
    pub fn id(&self, site: &str) -> String {
        let site = python_strip(site).as_bytes();
        let (prefix, digest): (&str, [u8; 32]) = match &self.keyed {
            Some(mac) => {
                let mut mac = mac.clone();
                mac.update(site);
                (KEYED_PREFIX, mac.finalize().into_bytes().into())
            }
            None => (UNKEYED_PREFIX, Sha256::digest(site).into()),
        };
        let mut id = String::with_capacity(prefix.len() + DIGEST_HEX_LEN);
        id.push_str(prefix);
        push_hex(&mut id, &digest[..DIGEST_HEX_LEN / 2]);
        id
    }
}

/// The id of the random game with this counter: `cwm_random_00042`.
pub fn random_game_id(counter: u64) -> String {
    format!("{RANDOM_PREFIX}{counter:05}")
}

/// Removes leading and trailing whitespace the way Python's `str.strip()` does: Unicode
/// White_Space plus the separators U+001C..U+001F, which Python also counts as space.
pub fn python_strip(text: &str) -> &str {
    text.trim_matches(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
}

/// Appends lower-case hex digits of `bytes`.
fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for &byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 15)]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values computed with Python's hmac and hashlib modules.
    #[test]
    fn keyed_ids_match_python_hmac() {
        let ids = RealGameIds::new(Some(&IdKey::new("test-key")));
        assert!(ids.is_keyed());
        assert_eq!(
            ids.id("https://lichess.org/abcdEFGH"),
            "cwm_727cc806934af35ab2485c15"
        );
        let ids = RealGameIds::new(Some(&IdKey::new("clé 🔑")));
        assert_eq!(
            ids.id("https://lichess.org/x1y2z3"),
            "cwm_d10ade3ade18ffde827155e3"
        );
    }

    #[test]
    fn site_is_stripped_like_python() {
        let ids = RealGameIds::new(Some(&IdKey::new("test-key")));
        assert_eq!(
            ids.id(" \t\u{1c}https://lichess.org/abcdEFGH\u{a0}\n"),
            "cwm_727cc806934af35ab2485c15"
        );
        assert_eq!(python_strip("\u{1c} a \u{1f}\u{a0}"), "a");
    }

    #[test]
    fn unkeyed_ids_are_prefixed_sha256() {
        let ids = RealGameIds::new(None);
        assert!(!ids.is_keyed());
        assert_eq!(
            ids.id("https://lichess.org/abcdEFGH"),
            "cwm_sha256_41f7ed06d7ebb6c50364d06f"
        );
    }

    #[test]
    fn key_is_not_printed() {
        let key = IdKey::new("secret");
        assert!(!format!("{key:?}").contains("secret"));
        let ids = RealGameIds::new(Some(&key));
        assert!(!format!("{ids:?}").contains("secret"));
    }

    #[test]
    fn random_ids_are_zero_padded() {
        assert_eq!(random_game_id(0), "cwm_random_00000");
        assert_eq!(random_game_id(42), "cwm_random_00042");
        assert_eq!(random_game_id(123_456), "cwm_random_123456");
    }
}
