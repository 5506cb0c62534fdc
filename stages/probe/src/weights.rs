//! The probes' weights on disk: `probes.bin` (little-endian `f32`) and its index
//! `probes.json` ([`cwm_formats::probe::ProbeWeights`]). Each probe is stored as its
//! `[outputs, d]` weight matrix (one row per logit: the direction that raises it, what an
//! editing experiment adds to a hidden state) then its `outputs` biases.

use std::path::Path;

use cwm_formats::Versioned;
use cwm_formats::probe::{ProbeEntry, ProbeWeights, WEIGHTS_FILE, WEIGHTS_INDEX_FILE};

use crate::ProbeError;
use crate::linear::{LinearProbe, outputs_of};

/// A fitted probe with its set and layer.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedProbe {
    /// `id` or `ood`.
    pub set: String,
    /// ℓ.
    pub layer: u32,
    /// The probe.
    pub probe: LinearProbe,
}

/// Writes `probes` (all of width `d` and `groups` groups) into `dir`: the numbers first, the
/// index last, each whole or not at all.
///
/// # Errors
/// [`ProbeError::Invalid`] when the probes differ in shape; [`ProbeError::Io`] on write
/// errors.
pub fn write_weights(
    dir: &Path,
    d: usize,
    groups: usize,
    probes: &[NamedProbe],
) -> Result<(), ProbeError> {
    let outputs = outputs_of(groups);
    let mut bytes = Vec::with_capacity(probes.len() * (d + 1) * outputs * 4);
    let mut entries = Vec::with_capacity(probes.len());
    for named in probes {
        let p = &named.probe;
        if p.d != d || p.groups != groups || p.weight.len() != d * outputs {
            return Err(ProbeError::Invalid(format!(
                "probe {} layer {} has shape d {} groups {}, the file d {d} groups {groups}",
                named.set, named.layer, p.d, p.groups
            )));
        }
        entries.push(ProbeEntry {
            set: named.set.clone(),
            layer: named.layer,
            offset: (bytes.len() / 4) as u64,
        });
        for j in 0..outputs {
            for value in p.output_vector(j) {
                bytes.extend_from_slice(&value.to_le_bytes());
            }
        }
        for value in &p.bias {
            bytes.extend_from_slice(&value.to_le_bytes());
        }
    }
    let bin = dir.join(WEIGHTS_FILE);
    cwm_formats::fs::write_atomic(&bin, &bytes).map_err(|e| ProbeError::io(&bin, e))?;
    let index = ProbeWeights {
        version: ProbeWeights::VERSION,
        d_model: d as u32,
        groups: groups as u32,
        outputs: outputs as u32,
        probes: entries,
    };
    cwm_formats::write_json(&dir.join(WEIGHTS_INDEX_FILE), &index)?;
    Ok(())
}

/// Reads the probes a probe artifact's `dir` holds, in index order.
///
/// # Errors
/// [`ProbeError::Format`] for a missing or unreadable index; [`ProbeError::Io`] for an
/// unreadable `probes.bin`; [`ProbeError::Invalid`] when an entry lies outside it.
pub fn read_weights(dir: &Path) -> Result<Vec<NamedProbe>, ProbeError> {
    let index: ProbeWeights = cwm_formats::read_json(&dir.join(WEIGHTS_INDEX_FILE))?;
    let bin = dir.join(WEIGHTS_FILE);
    let bytes = std::fs::read(&bin).map_err(|e| ProbeError::io(&bin, e))?;
    let floats: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let (d, outputs) = (index.d_model as usize, index.outputs as usize);
    if outputs != outputs_of(index.groups as usize) {
        return Err(ProbeError::Invalid(format!(
            "{}: {} outputs for {} label groups",
            bin.display(),
            outputs,
            index.groups
        )));
    }
    let size = (d + 1) * outputs;
    index
        .probes
        .iter()
        .map(|entry| {
            let start = entry.offset as usize;
            let Some(numbers) = floats.get(start..start + size) else {
                return Err(ProbeError::Invalid(format!(
                    "{}: probe {} layer {} at {start} runs past the file's {} values",
                    bin.display(),
                    entry.set,
                    entry.layer,
                    floats.len()
                )));
            };
            Ok(NamedProbe {
                set: entry.set.clone(),
                layer: entry.layer,
                probe: from_rows(
                    &numbers[..d * outputs],
                    &numbers[d * outputs..],
                    d,
                    index.groups as usize,
                ),
            })
        })
        .collect()
}

/// A probe from its `[outputs, d]` rows and biases.
fn from_rows(rows: &[f32], bias: &[f32], d: usize, groups: usize) -> LinearProbe {
    let outputs = bias.len();
    let mut weight = vec![0.0; d * outputs];
    for j in 0..outputs {
        for i in 0..d {
            weight[i * outputs + j] = rows[j * d + i];
        }
    }
    LinearProbe {
        d,
        groups,
        weight,
        bias: bias.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(d: usize, seed: f32) -> LinearProbe {
        let outputs = outputs_of(1);
        LinearProbe {
            d,
            groups: 1,
            weight: (0..d * outputs).map(|i| i as f32 * seed).collect(),
            bias: (0..outputs).map(|i| -(i as f32)).collect(),
        }
    }

    #[test]
    fn weights_read_back_exactly_and_a_cut_file_is_refused() {
        let dir = std::env::temp_dir().join(format!("cwm-probe-weights-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let probes = vec![
            NamedProbe {
                set: "id".into(),
                layer: 0,
                probe: probe(3, 0.5),
            },
            NamedProbe {
                set: "ood".into(),
                layer: 2,
                probe: probe(3, -1.25),
            },
        ];
        write_weights(&dir, 3, 1, &probes).unwrap();
        assert_eq!(read_weights(&dir).unwrap(), probes);
        let bin = dir.join(WEIGHTS_FILE);
        let bytes = std::fs::read(&bin).unwrap();
        std::fs::write(&bin, &bytes[..bytes.len() - 4]).unwrap();
        let err = read_weights(&dir).unwrap_err().to_string();
        assert!(
            err.contains("probe ood layer 2") && err.contains("runs past"),
            "{err}"
        );
        let wrong = vec![NamedProbe {
            set: "id".into(),
            layer: 0,
            probe: probe(4, 1.0),
        }];
        assert!(matches!(
            write_weights(&dir, 3, 1, &wrong),
            Err(ProbeError::Invalid(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
