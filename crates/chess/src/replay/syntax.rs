//! The syntax step: a streaming iterator of [`RawGame`]s over any [`Read`].

use std::{
    io::{self, Read},
    mem,
    ops::ControlFlow,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use pgn_reader::{Outcome, RawTag, Reader, SanPlus, Skip, Visitor};
use shakmaty::{CastlingMode, Chess, fen::Fen, san::San};

use super::RejectReason;
use crate::encode::{EpConvention, INITIAL_STATE, encode_state};

/// The FEN of the standard initial position.
pub const STANDARD_START_FEN: &str = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1";

/// Longest tag line the reader promises to handle (pgn-reader's default is 255 bytes; longer
/// lines may be reported as unterminated tags).
const SUPPORTED_TAG_LINE_BYTES: usize = 16 * 1024;

/// Variant header values that mean standard chess (compared case-insensitively), as
/// python-chess's variant lookup accepts them.
const STANDARD_VARIANT_NAMES: [&str; 5] =
    ["standard", "chess", "classical", "normal", "from position"];

/// The headers a game keeps. Player names are deliberately absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GameHeaders {
    /// `Event`, e.g. "Rated Blitz game".
    pub event: Option<String>,
    /// `Site`, e.g. `https://lichess.org/abcdEFGH`; the source of the game's id.
    pub site: Option<String>,
    /// `Result`: "1-0", "0-1", "1/2-1/2" or "*".
    pub result: Option<String>,
    /// `WhiteElo`.
    pub white_elo: Option<String>,
    /// `BlackElo`.
    pub black_elo: Option<String>,
    /// `TimeControl`, e.g. "300+0".
    pub time_control: Option<String>,
    /// `Termination`, e.g. "Normal" or "Time forfeit".
    pub termination: Option<String>,
    /// `UTCDate`, e.g. "2025.03.01".
    pub utc_date: Option<String>,
    /// `UTCTime`, e.g. "00:00:12".
    pub utc_time: Option<String>,
    /// `Variant`, kept for filtering.
    pub variant: Option<String>,
    /// `SetUp`, kept for filtering.
    pub set_up: Option<String>,
    /// `FEN`, kept for filtering and for replays from a set-up position.
    pub fen: Option<String>,
}

impl GameHeaders {
    /// The slot of a header name this struct keeps, or `None` for one it ignores.
    fn slot(&mut self, name: &[u8]) -> Option<&mut Option<String>> {
        Some(match name {
            b"Event" => &mut self.event,
            b"Site" => &mut self.site,
            b"Result" => &mut self.result,
            b"WhiteElo" => &mut self.white_elo,
            b"BlackElo" => &mut self.black_elo,
            b"TimeControl" => &mut self.time_control,
            b"Termination" => &mut self.termination,
            b"UTCDate" => &mut self.utc_date,
            b"UTCTime" => &mut self.utc_time,
            b"Variant" => &mut self.variant,
            b"SetUp" => &mut self.set_up,
            b"FEN" => &mut self.fen,
            _ => return None,
        })
    }

    /// Whether the Variant header is absent or names standard chess.
    pub fn is_standard_variant(&self) -> bool {
        self.variant.as_deref().is_none_or(|variant| {
            let variant = variant.trim();
            STANDARD_VARIANT_NAMES
                .iter()
                .any(|name| variant.eq_ignore_ascii_case(name))
        })
    }

    /// Whether the game starts from a set-up position: a FEN header that is not the standard
    /// initial position. A `SetUp` header without a FEN is ignored, as python-chess ignores it.
    pub fn has_set_up_start(&self) -> bool {
        self.fen
            .as_deref()
            .is_some_and(|fen| !is_standard_start(fen))
    }
}

/// Whether a FEN denotes exactly the standard initial position (counters included).
fn is_standard_start(fen: &str) -> bool {
    let fen = fen.trim();
    fen == STANDARD_START_FEN
        || Fen::from_ascii(fen.as_bytes())
            .ok()
            .and_then(|fen| fen.into_position::<Chess>(CastlingMode::Standard).ok())
            .is_some_and(|position| {
                encode_state(&position, EpConvention::Reference) == INITIAL_STATE
            })
}

/// Why the reader could not read a game cleanly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SyntaxProblem {
    /// The reader gave up on the game with this message (e.g. "unterminated tag",
    /// "unterminated comment"); what it had read before is kept in the [`RawGame`].
    #[error("{0}")]
    Reader(String),
    /// SAN tokens follow the game's result marker, which usually means several games were run
    /// together without the blank line between them.
    #[error("{moves_after_result} moves after the result marker")]
    MovesAfterResult {
        /// How many SAN tokens follow the first result marker.
        moves_after_result: usize,
    },
}

/// One game as read from the PGN, before any legality check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawGame {
    /// 0-based index of the game in its stream: every game the reader finds counts, kept or not.
    pub index: u64,
    /// Byte offset in the stream of the game's first byte (after leading whitespace, a BOM and
    /// `%` escape lines), usually its first `[`.
    pub offset: u64,
    /// The kept headers.
    pub headers: GameHeaders,
    /// Mainline SAN tokens, in order.
    pub sans: Vec<San>,
    /// The movetext's first result marker (`1-0`, `0-1`, `1/2-1/2`, `*`), if any.
    pub outcome: Option<Outcome>,
    /// A syntax problem, if the game was not read cleanly.
    pub syntax_problem: Option<SyntaxProblem>,
}

impl RawGame {
    /// Number of plies in the mainline.
    pub fn plies(&self) -> usize {
        self.sans.len()
    }

    /// The cheap filters, in order: syntax, Site, variant, FEN start, length (`min_plies`).
    ///
    /// # Errors
    ///
    /// The first [`RejectReason`] that applies.
    pub fn screen(&self, min_plies: usize) -> Result<(), RejectReason> {
        if let Some(problem) = &self.syntax_problem {
            return Err(RejectReason::PgnSyntax(problem.clone()));
        }
        if self
            .headers
            .site
            .as_deref()
            .is_none_or(|site| crate::ids::python_strip(site).is_empty())
        {
            return Err(RejectReason::MissingSite);
        }
        if !self.headers.is_standard_variant() {
            return Err(RejectReason::NonStandardVariant {
                variant: self.headers.variant.clone().unwrap_or_default(),
            });
        }
        if self.headers.has_set_up_start() {
            return Err(RejectReason::FenStart {
                fen: self.headers.fen.clone().unwrap_or_default(),
            });
        }
        if self.plies() < min_plies {
            return Err(RejectReason::TooShort {
                plies: self.plies(),
                min_plies,
            });
        }
        Ok(())
    }
}

/// The pgn-reader visitor of the syntax step. It keeps the game being read in its own fields
/// (not in pgn-reader's per-phase values) so that a game the reader gives up on still has what
/// was read before the problem.
#[derive(Debug, Default)]
struct SyntaxVisitor {
    headers: GameHeaders,
    sans: Vec<San>,
    outcome: Option<Outcome>,
    moves_after_result: usize,
}

impl SyntaxVisitor {
    fn take_game(&mut self, index: u64, offset: u64, problem: Option<SyntaxProblem>) -> RawGame {
        let syntax_problem = problem.or(match self.moves_after_result {
            0 => None,
            moves_after_result => Some(SyntaxProblem::MovesAfterResult { moves_after_result }),
        });
        RawGame {
            index,
            offset,
            headers: mem::take(&mut self.headers),
            sans: mem::take(&mut self.sans),
            outcome: self.outcome.take(),
            syntax_problem,
        }
    }
}

impl Visitor for SyntaxVisitor {
    type Tags = ();
    type Movetext = ();
    type Output = ();

    fn begin_tags(&mut self) -> ControlFlow<Self::Output, Self::Tags> {
        self.headers = GameHeaders::default();
        self.sans.clear();
        self.outcome = None;
        self.moves_after_result = 0;
        ControlFlow::Continue(())
    }

    fn tag(
        &mut self,
        _tags: &mut Self::Tags,
        name: &[u8],
        value: RawTag<'_>,
    ) -> ControlFlow<Self::Output> {
        if let Some(slot) = self.headers.slot(name.trim_ascii()) {
            // Later duplicates win, as in python-chess's header dict.
            *slot = Some(value.decode_utf8_lossy().into_owned());
        }
        ControlFlow::Continue(())
    }

    fn begin_movetext(&mut self, _tags: Self::Tags) -> ControlFlow<Self::Output, Self::Movetext> {
        ControlFlow::Continue(())
    }

    fn san(
        &mut self,
        _movetext: &mut Self::Movetext,
        san_plus: SanPlus,
    ) -> ControlFlow<Self::Output> {
        if self.outcome.is_some() {
            self.moves_after_result += 1;
        } else {
            self.sans.push(san_plus.san);
        }
        ControlFlow::Continue(())
    }

    fn begin_variation(
        &mut self,
        _movetext: &mut Self::Movetext,
    ) -> ControlFlow<Self::Output, Skip> {
        ControlFlow::Continue(Skip(true))
    }

    fn outcome(
        &mut self,
        _movetext: &mut Self::Movetext,
        outcome: Outcome,
    ) -> ControlFlow<Self::Output> {
        if self.outcome.is_none() {
            self.outcome = Some(outcome);
        }
        ControlFlow::Continue(())
    }

    fn end_game(&mut self, _movetext: Self::Movetext) -> Self::Output {}
}

/// A [`Read`] that counts the bytes it hands out, so the stream position is known while
/// pgn-reader owns the reader.
#[derive(Debug)]
struct CountingRead<R> {
    inner: R,
    bytes_read: Arc<AtomicU64>,
}

impl<R: Read> Read for CountingRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes_read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Streaming iterator of the games of a PGN: yields every game the reader finds as a
/// [`RawGame`], in order, holding only pgn-reader's fixed buffer and the current game.
///
/// Byte offsets: pgn-reader does not expose its position, so the underlying reader is wrapped in
/// a byte counter and the position is that count minus the bytes still buffered, taken after
/// pgn-reader has skipped the whitespace before a game.
///
/// Yields `Err` only for an I/O error of the underlying reader, after which it ends. A game the
/// reader gives up on (unterminated tag or comment) is yielded with a [`SyntaxProblem`].
#[derive(Debug)]
pub struct PgnGames<R> {
    reader: Reader<CountingRead<R>>,
    bytes_read: Arc<AtomicU64>,
    visitor: SyntaxVisitor,
    next_index: u64,
    finished: bool,
}

impl<R: Read> PgnGames<R> {
    /// Reads games from `reader`. No extra buffering is needed: pgn-reader buffers itself.
    pub fn new(reader: R) -> PgnGames<R> {
        let bytes_read = Arc::new(AtomicU64::new(0));
        let counting = CountingRead {
            inner: reader,
            bytes_read: Arc::clone(&bytes_read),
        };
        PgnGames {
            reader: Reader::build(counting)
                .set_supported_tag_line_length(SUPPORTED_TAG_LINE_BYTES)
                .finish(),
            bytes_read,
            visitor: SyntaxVisitor::default(),
            next_index: 0,
            finished: false,
        }
    }

    /// The byte position pgn-reader has reached in the stream.
    fn stream_position(&self) -> u64 {
        self.bytes_read
            .load(Ordering::Relaxed)
            .saturating_sub(self.reader.buffer().len() as u64)
    }

    /// Reads the next game, `Ok(None)` at the end of the stream.
    fn read_next(&mut self) -> io::Result<Option<RawGame>> {
        if !self.reader.has_more()? {
            return Ok(None);
        }
        let offset = self.stream_position();
        let index = self.next_index;
        self.next_index += 1;
        match self.reader.read_game(&mut self.visitor) {
            Ok(Some(())) => Ok(Some(self.visitor.take_game(index, offset, None))),
            Ok(None) => Ok(None),
            Err(err) if err.kind() == io::ErrorKind::InvalidData => {
                let problem = SyntaxProblem::Reader(err.to_string());
                Ok(Some(self.visitor.take_game(index, offset, Some(problem))))
            }
            Err(err) => Err(err),
        }
    }
}

impl<R: Read> Iterator for PgnGames<R> {
    type Item = io::Result<RawGame>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.finished {
            return None;
        }
        let before = self.stream_position();
        let next = self.read_next();
        // Defensive: a call that yields nothing new, fails, or does not move forward ends the
        // stream, so no input can make the iterator loop forever.
        let stalled = matches!(next, Ok(Some(_))) && self.stream_position() == before;
        if !matches!(next, Ok(Some(_))) || stalled {
            self.finished = true;
        }
        next.transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(pgn: &[u8]) -> Vec<RawGame> {
        PgnGames::new(pgn).collect::<io::Result<Vec<_>>>().unwrap()
    }

    fn san_text(game: &RawGame) -> String {
        game.sans
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn reads_headers_mainline_and_offsets() {
        let pgn = b"[Event \"Rated Blitz game\"]\n[Site \"https://lichess.org/abc\"]\n\
            [White \"someone\"]\n[Result \"1-0\"]\n[WhiteElo \"1500\"]\n\n\
            1. e4 { a comment } e5 (1... c5 2. Nf3) 2. Nf3 $1 Nc6!? 1-0\n\n\
            [Site \"https://lichess.org/def\"]\n\n1. d4 *\n";
        let games = read_all(pgn);
        assert_eq!(games.len(), 2);
        let first = &games[0];
        assert_eq!(first.index, 0);
        assert_eq!(first.offset, 0);
        assert_eq!(first.headers.event.as_deref(), Some("Rated Blitz game"));
        assert_eq!(
            first.headers.site.as_deref(),
            Some("https://lichess.org/abc")
        );
        assert_eq!(first.headers.result.as_deref(), Some("1-0"));
        assert_eq!(first.headers.white_elo.as_deref(), Some("1500"));
        assert_eq!(san_text(first), "e4 e5 Nf3 Nc6");
        assert_eq!(first.syntax_problem, None);

        let second = &games[1];
        assert_eq!(second.index, 1);
        let offset = pgn
            .windows(9)
            .rposition(|window| window == b"[Site \"ht")
            .unwrap();
        assert_eq!(second.offset, offset as u64);
        assert_eq!(san_text(second), "d4");
        assert_eq!(second.outcome, Some(Outcome::Unknown));
    }

    #[test]
    fn a_tag_longer_than_the_buffer_is_a_syntax_problem_and_the_stream_goes_on() {
        let mut pgn = b"[Site \"https://lichess.org/a\"]\n[Event \"".to_vec();
        pgn.extend(std::iter::repeat_n(b'x', 100_000));
        pgn.extend_from_slice(
            b"\"]\n\n1. e4 *\n\n[Site \"https://lichess.org/b\"]\n\n1. d4 d5 *\n",
        );
        let games = read_all(&pgn);
        assert_eq!(
            games[0].syntax_problem,
            Some(SyntaxProblem::Reader("unterminated tag".to_owned()))
        );
        assert_eq!(
            games[0].headers.site.as_deref(),
            Some("https://lichess.org/a")
        );
        let last = games.last().unwrap();
        assert_eq!(last.headers.site.as_deref(), Some("https://lichess.org/b"));
        assert_eq!(san_text(last), "d4 d5");
    }

    #[test]
    fn unterminated_input_keeps_what_was_read() {
        let games = read_all(b"[Site \"https://lichess.org/a\"]\n[Event \"no closing quote");
        assert_eq!(games.len(), 1);
        assert_eq!(
            games[0].headers.site.as_deref(),
            Some("https://lichess.org/a")
        );
        assert!(games[0].syntax_problem.is_some());

        let games = read_all(b"[Site \"https://lichess.org/a\"]\n\n1. e4 { unterminated");
        assert_eq!(san_text(&games[0]), "e4");
        assert_eq!(
            games[0].syntax_problem,
            Some(SyntaxProblem::Reader("unterminated comment".to_owned()))
        );

        // A quote left open at the end of a line ends the value there, as pgn-reader reads it.
        let games = read_all(b"[Event \"open\n[Site \"s\"]\n\n1. e4 *\n");
        assert_eq!(games[0].headers.event.as_deref(), Some("open"));
        assert_eq!(games[0].syntax_problem, None);
    }

    #[test]
    fn moves_after_the_result_are_flagged() {
        let games = read_all(b"1. e4 e5 1-0 1. d4 d5 0-1\n");
        assert_eq!(games.len(), 1);
        assert_eq!(san_text(&games[0]), "e4 e5");
        assert_eq!(
            games[0].syntax_problem,
            Some(SyntaxProblem::MovesAfterResult {
                moves_after_result: 2
            })
        );
    }

    #[test]
    fn screening_order_and_reasons() {
        let mut game = read_all(b"[Site \"x\"]\n\n1. e4 *\n").remove(0);
        assert_eq!(
            game.screen(2),
            Err(RejectReason::TooShort {
                plies: 1,
                min_plies: 2
            })
        );
        assert_eq!(game.screen(1), Ok(()));
        game.headers.fen = Some(STANDARD_START_FEN.to_owned());
        assert_eq!(game.screen(1), Ok(()));
        game.headers.fen = Some("8/8/8/8/8/8/8/K6k w - - 0 1".to_owned());
        assert!(matches!(game.screen(1), Err(RejectReason::FenStart { .. })));
        game.headers.variant = Some("Crazyhouse".to_owned());
        assert!(matches!(
            game.screen(1),
            Err(RejectReason::NonStandardVariant { .. })
        ));
        game.headers.site = Some("  ".to_owned());
        assert_eq!(game.screen(1), Err(RejectReason::MissingSite));
    }

    #[test]
    fn variant_names() {
        let mut headers = GameHeaders::default();
        assert!(headers.is_standard_variant());
        for name in ["Standard", "chess", " Normal ", "From Position"] {
            headers.variant = Some(name.to_owned());
            assert!(headers.is_standard_variant(), "{name}");
        }
        for name in ["Chess960", "Atomic", "Three-check", ""] {
            headers.variant = Some(name.to_owned());
            assert!(!headers.is_standard_variant(), "{name}");
        }
    }

    #[test]
    fn garbage_never_panics_or_loops() {
        // A small xorshift generator: deterministic, no extra dependency.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let alphabet =
            b"[]\"\\{}();%$!?*.-+#=/0123456789abcdefghKQRBNPOox \n\r\t\xc2\xbd\xef\xbb\xbf\xff";
        for _ in 0..300 {
            let len = (next() % 600) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            let mut n_games = 0;
            for game in PgnGames::new(&bytes[..]) {
                let game = game.unwrap();
                assert!(game.offset <= bytes.len() as u64);
                let _ = game.screen(0);
                n_games += 1;
                assert!(n_games <= bytes.len() + 1);
            }
        }
    }
}
