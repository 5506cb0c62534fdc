//! The data stages' library functions on `../shared/data` (when absent: a failure under CI, a
//! loud skip elsewhere; see `require`):
//! tokenized labels equal `cwm_chess`'s SAN replay, and the reference random games come out of
//! `export_jsonl` byte for byte.

use std::path::{Path, PathBuf};

use arrow::array::{Array, AsArray};
use arrow::datatypes::UInt16Type;
use cwm_chess::encode::EpConvention;
use cwm_chess::replay::{PgnGames, ReplayConfig, replay_game};
use cwm_stage::Progress;
use cwm_stage_data::{
    OutputFormat, ParseOptions, ProcessOptions, RandomUniformOptions, TokenizeOptions,
    export_jsonl, generate_random_uniform, import_jsonl, process_pgn, tokenize_games,
};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use cwm_testkit::shared_data;

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cwm-data-it-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// (id, moves with START, flat states) of every row of the shards in `dir`.
fn read_shards(dir: &Path) -> Vec<(String, Vec<u16>, Vec<u8>)> {
    let mut rows = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
        .collect();
    files.sort();
    for file in files {
        let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&file).unwrap())
            .unwrap()
            .build()
            .unwrap();
        for batch in reader {
            let batch = batch.unwrap();
            let ids = batch
                .column_by_name("id")
                .unwrap()
                .as_string::<i32>()
                .clone();
            let moves = batch
                .column_by_name("moves")
                .unwrap()
                .as_list::<i32>()
                .clone();
            let states = batch
                .column_by_name("states")
                .unwrap()
                .as_binary::<i32>()
                .clone();
            for i in 0..batch.num_rows() {
                let m = moves.value(i);
                let m = m.as_primitive::<UInt16Type>();
                rows.push((
                    ids.value(i).to_owned(),
                    m.values().to_vec(),
                    states.value(i).to_vec(),
                ));
                assert_eq!(m.null_count(), 0);
            }
        }
    }
    rows
}

#[test]
fn tokenized_labels_equal_the_san_replay_on_every_real_game() {
    let Some(shared) = shared_data("") else {
        return;
    };
    for name in [
        "lichess_db_1000k.pgn",
        "lichess_2025_legal.pgn",
        "lichess_2025_one_illegal.pgn",
    ] {
        let pgn = shared.join("real").join(name);
        let dir = temp(&format!("tok-{name}"));
        let games_dir = dir.join("games");
        let report = process_pgn(&ProcessOptions {
            pgn: pgn.clone(),
            out_dir: games_dir.clone(),
            format: OutputFormat::Parquet,
            threads: 2,
            id_key: cwm_stage_data::IdKeySource::None,
            ..ProcessOptions::default()
        })
        .unwrap();
        for ep in EpConvention::ALL {
            let out = dir.join("tok");
            let _ = std::fs::remove_dir_all(&out);
            std::fs::create_dir_all(&out).unwrap();
            let options = TokenizeOptions {
                ep_convention: ep,
                shard_games: 97,
                threads: 2,
                ..TokenizeOptions::default()
            };
            let summary =
                tokenize_games(&games_dir, &out, &options, &Progress::disabled(), &|| false)
                    .unwrap();
            assert_eq!(summary.games, report.kept);
            // coverage.json lists the distinct ids it counts, ascending.
            let coverage: cwm_formats::tokenize::Coverage =
                cwm_formats::read_json(&out.join("coverage.json")).unwrap();
            let ids = coverage.seen_move_ids.expect("the id list");
            assert_eq!(ids.len() as u64, coverage.distinct_move_ids);
            assert!(ids.windows(2).all(|w| w[0] < w[1]) && ids.iter().all(|&id| id < 20_480));
            let rows = read_shards(&out);
            // The expected labels, straight from cwm_chess's SAN replay of the same file.
            let config = ReplayConfig {
                ep_convention: ep,
                ..ReplayConfig::default()
            };
            let expected: Vec<_> = PgnGames::new(std::fs::File::open(&pgn).unwrap())
                .filter_map(|raw| replay_game(raw.unwrap(), &config).ok())
                .collect();
            assert_eq!(rows.len(), expected.len(), "{name}");
            for (row, game) in rows.iter().zip(&expected) {
                assert_eq!(row.1, game.replay.moves, "{name} {}", row.0);
                assert_eq!(row.2, game.replay.flat_states(), "{name} {}", row.0);
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn jsonl_output_of_process_matches_the_export_of_the_table() {
    let Some(shared) = shared_data("") else {
        return;
    };
    let pgn = shared.join("real/lichess_2025_legal.pgn");
    let dir = temp("jsonl-roundtrip");
    let common = ProcessOptions {
        pgn,
        threads: 2,
        id_key: cwm_stage_data::IdKeySource::Param("test key".into()),
        ..ProcessOptions::default()
    };
    process_pgn(&ProcessOptions {
        out_dir: dir.join("direct"),
        format: OutputFormat::Jsonl { shard_size: 40 },
        ..common.clone()
    })
    .unwrap();
    process_pgn(&ProcessOptions {
        out_dir: dir.join("table"),
        ..common
    })
    .unwrap();
    let exported = export_jsonl(&dir.join("table"), &dir.join("exported"), 40, 1).unwrap();
    assert!(exported.len() > 1);
    for shard in &exported {
        let name = shard.file_name().unwrap();
        assert_eq!(
            std::fs::read(shard).unwrap(),
            std::fs::read(dir.join("direct").join(name)).unwrap()
        );
    }
    // Import and export again: the same bytes.
    import_jsonl(&dir.join("exported"), &dir.join("imported")).unwrap();
    let again = export_jsonl(&dir.join("imported"), &dir.join("again"), 40, 2).unwrap();
    for (a, b) in exported.iter().zip(&again) {
        assert_eq!(std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn reference_random_games_export_byte_for_byte() {
    let Some(shared) = shared_data("") else {
        return;
    };
    let reference =
        std::fs::read(shared.join("reference-vectors/random_seed0_first50.jsonl")).unwrap();
    let dir = temp("random");
    let options = RandomUniformOptions {
        games: 50,
        ..RandomUniformOptions::default()
    };
    let n = generate_random_uniform(
        &options,
        &dir.join("table"),
        OutputFormat::Parquet,
        &Progress::disabled(),
        &|| false,
    )
    .unwrap();
    assert_eq!(n, 50);
    let shards = export_jsonl(&dir.join("table"), &dir.join("jsonl"), 10_000, 2).unwrap();
    assert!(
        std::fs::read(&shards[0]).unwrap() == reference,
        "export differs from the reference"
    );
    // The direct JSONL output too.
    generate_random_uniform(
        &options,
        &dir.join("direct"),
        OutputFormat::Jsonl { shard_size: 10_000 },
        &Progress::disabled(),
        &|| false,
    )
    .unwrap();
    assert!(std::fs::read(dir.join("direct/chess_000000.jsonl")).unwrap() == reference);
    std::fs::remove_dir_all(&dir).unwrap();
    let _ = ParseOptions::default();
}
