//! Gated DeltaNet and Mamba: the recurrences against hand computations in f64 straight from the
//! spec's formulas, sequential and chunked scans agreeing on outputs and gradients, and the
//! inits' ranges.

use burn::module::Module;
use burn::prelude::*;
use burn::tensor::Distribution;
use cwm_models::{
    DeltaRuleInputs, Family, GatedDeltaNet, Mamba2Mixer, Mamba3Mixer, Mixer, Model, ModelConfig,
    Pairing, Scan, Size, StateModel, delta_rule_chunked, delta_rule_sequential, inverse_softplus,
    rotate, scalar_decay_chunked, scalar_decay_sequential,
};

fn host<const D: usize>(t: Tensor<D>) -> Vec<f64> {
    t.into_data()
        .try_to_vec::<f32>()
        .unwrap()
        .into_iter()
        .map(f64::from)
        .collect()
}

fn max_abs_diff<const D: usize>(a: Tensor<D>, b: Tensor<D>) -> f32 {
    (a - b).abs().max().into_scalar()
}

fn tensor<const D: usize>(values: Vec<f64>, shape: [usize; D], device: &Device) -> Tensor<D> {
    let values: Vec<f32> = values.into_iter().map(|v| v as f32).collect();
    Tensor::from_data(TensorData::new(values, shape), device)
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn softplus(x: f64) -> f64 {
    if x > 20.0 { x } else { x.exp().ln_1p() }
}

fn silu(x: f64) -> f64 {
    x * sigmoid(x)
}

fn rms_norm(x: &[f64], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    x.iter().map(|v| v / (ms + eps).sqrt()).collect()
}

/// Two steps of the delta rule (sequential, and chunked by 1 and 2) with K = V = 2, one head,
/// against the matrix form
/// `S_t = α_t (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ`, `o_t = S_tᵀ q_t`.
#[test]
fn delta_rule_matches_the_matrix_form() {
    let device = Device::flex();
    let q = [[0.6, 0.8], [1.0, 0.0]];
    let k = [[1.0, 0.0], [0.6, -0.8]];
    let v = [[2.0, -1.0], [0.5, 3.0]];
    let beta = [1.5, 0.25];
    let g = [-0.1, -0.7];
    let inputs = DeltaRuleInputs {
        q: tensor(q.concat(), [1, 2, 1, 2], &device),
        k: tensor(k.concat(), [1, 2, 1, 2], &device),
        v: tensor(v.concat(), [1, 2, 1, 2], &device),
        beta: tensor(beta.to_vec(), [1, 2, 1], &device),
        g: tensor(g.to_vec(), [1, 2, 1], &device),
    };
    let outputs = [
        host(delta_rule_sequential(&inputs)),
        host(delta_rule_chunked(&inputs, 1)),
        host(delta_rule_chunked(&inputs, 2)),
    ];
    let mut s = [[0.0f64; 2]; 2]; // s[key][value]
    for t in 0..2 {
        let alpha = f64::exp(g[t]);
        let mut next = [[0.0; 2]; 2];
        for i in 0..2 {
            for j in 0..2 {
                // ((I − β k kᵀ) S)[i][j] = S[i][j] − β k_i Σ_m k_m S[m][j]
                let projected: f64 = (0..2).map(|m| k[t][m] * s[m][j]).sum();
                next[i][j] =
                    alpha * (s[i][j] - beta[t] * k[t][i] * projected) + beta[t] * k[t][i] * v[t][j];
            }
        }
        s = next;
        for j in 0..2 {
            let o: f64 = (0..2).map(|i| s[i][j] * q[t][i]).sum();
            for out in &outputs {
                assert!((out[t * 2 + j] - o).abs() < 1e-5, "t={t} j={j}");
            }
        }
    }
}

/// The layer's q, k, β and decay follow spec B.3 steps 3–5: unit-norm keys, queries of norm
/// 1/√48, β in (0, 2) for `gdn` and (0, 1) for `gdn_pos`, decays in (0, 1).
#[test]
fn gdn_layer_inputs_follow_spec_b3() {
    let device = Device::flex();
    for (family, beta_max) in [(Family::Gdn, 2.0), (Family::GdnPos, 1.0)] {
        let model = GatedDeltaNet::init(&ModelConfig::new(family, Size::D128), &device).unwrap();
        let layer = &model.backbone.layers[0].attn;
        let x = Tensor::<3>::random([2, 7, 128], Distribution::Normal(0.0, 1.0), &device);
        let inputs = layer.delta_rule_inputs(x);
        let norms = |t: Tensor<4>| host(t.square().sum_dim(3).sqrt());
        // |k| = |k̃| / sqrt(|k̃|² + 1e-6): just below 1 at the small init activations.
        for n in norms(inputs.k) {
            assert!(n <= 1.0 + 1e-6 && n > 0.99, "{family}: |k| = {n}");
        }
        for n in norms(inputs.q) {
            let n = n * 48f64.sqrt();
            assert!(n <= 1.0 + 1e-6 && n > 0.99, "{family}: |q|·√48 = {n}");
        }
        let betas = host(inputs.beta);
        assert!(betas.iter().all(|&b| b > 0.0 && b < beta_max), "{family}");
        if family == Family::Gdn {
            assert!(betas.iter().any(|&b| b > 1.0), "gdn doubles β");
        }
        assert!(host(inputs.g).iter().all(|&g| g < 0.0), "{family}");
        // Inits: A_log = log U(0, 16), softplus(dt_bias) in [1e-3, 1e-1].
        assert!(host(layer.a_log.val()).iter().all(|&a| a < 16f64.ln()));
        for dt in host(layer.dt_bias.val()) {
            let dt = softplus(dt);
            assert!((0.99e-3..=1.01e-1).contains(&dt), "dt = {dt}");
        }
    }
    assert!((inverse_softplus(0.05).exp().ln_1p() - 0.05).abs() < 1e-12);
}

/// Sequential and chunked scalar-decay scans agree on outputs and on the gradients of every
/// input, with several query and key slots, with queries and keys shared by the heads
/// (Mamba-2's one group), and a length that is not a multiple of the chunk.
#[test]
fn scalar_decay_scans_agree_on_outputs_and_gradients() {
    let device = Device::flex().autodiff();
    device.seed(7);
    let (batch, seq, heads, n, p) = (2, 19, 2, 6, 5);
    for (n_queries, n_keys, shared) in [(1, 1, false), (2, 4, false), (1, 1, true)] {
        let random =
            |shape: [usize; 5]| Tensor::<5>::random(shape, Distribution::Normal(0.0, 1.0), &device);
        let qk_heads = if shared { 1 } else { heads };
        let q = random([batch, seq, qk_heads, n_queries, n]);
        let k = random([batch, seq, qk_heads, n_keys, n]);
        let v = random([batch, seq, heads, n_keys, p]);
        let log_a = Tensor::<3>::random(
            [batch, seq, heads],
            Distribution::Uniform(-2.0, 0.0),
            &device,
        );
        let weights = random([batch, seq, heads, n_queries, p]);
        let run = |chunk: Option<usize>| {
            let (q, k, v, log_a) = (
                q.clone().detach().require_grad(),
                k.clone().detach().require_grad(),
                v.clone().detach().require_grad(),
                log_a.clone().detach().require_grad(),
            );
            let y = match chunk {
                None => scalar_decay_sequential(log_a.clone(), q.clone(), k.clone(), v.clone()),
                Some(c) => scalar_decay_chunked(log_a.clone(), q.clone(), k.clone(), v.clone(), c),
            };
            let grads = (y.clone() * weights.clone()).sum().backward();
            (
                y.detach(),
                q.grad(&grads).unwrap(),
                k.grad(&grads).unwrap(),
                v.grad(&grads).unwrap(),
                log_a.grad(&grads).unwrap(),
            )
        };
        let sequential = run(None);
        for chunk in [1, 4, 8, 64] {
            let chunked = run(Some(chunk));
            let what = format!("slots ({n_queries}, {n_keys}), shared {shared}, chunk {chunk}");
            assert!(
                max_abs_diff(sequential.0.clone(), chunked.0) < 1e-4,
                "{what}: y"
            );
            assert!(
                max_abs_diff(sequential.1.clone(), chunked.1) < 1e-4,
                "{what}: dq"
            );
            assert!(
                max_abs_diff(sequential.2.clone(), chunked.2) < 1e-4,
                "{what}: dk"
            );
            assert!(
                max_abs_diff(sequential.3.clone(), chunked.3) < 1e-4,
                "{what}: dv"
            );
            assert!(
                max_abs_diff(sequential.4.clone(), chunked.4) < 1e-3,
                "{what}: dlog_a"
            );
        }
    }
}

/// Queries and keys shared by the heads give what their copies, one per head, give: the same
/// outputs, and as the shared tensors' gradients the sums of the copies' over the heads, for
/// both scans.
#[test]
fn shared_queries_and_keys_are_their_copies_per_head() {
    let device = Device::flex().autodiff();
    device.seed(11);
    let (batch, seq, heads, n, p) = (2, 13, 3, 4, 5);
    let random =
        |shape: [usize; 5]| Tensor::<5>::random(shape, Distribution::Normal(0.0, 1.0), &device);
    let q = random([batch, seq, 1, 1, n]);
    let k = random([batch, seq, 1, 1, n]);
    let v = random([batch, seq, heads, 1, p]);
    let log_a = Tensor::<3>::random(
        [batch, seq, heads],
        Distribution::Uniform(-2.0, 0.0),
        &device,
    );
    let weights = random([batch, seq, heads, 1, p]);
    for chunk in [None, Some(4), Some(64)] {
        let run = |copied: bool| {
            let (q, k) = (
                q.clone().detach().require_grad(),
                k.clone().detach().require_grad(),
            );
            let per_head = |t: Tensor<5>| {
                if copied {
                    t.expand([batch, seq, heads, 1, n])
                } else {
                    t
                }
            };
            let (qs, ks) = (per_head(q.clone()), per_head(k.clone()));
            let y = match chunk {
                None => scalar_decay_sequential(log_a.clone(), qs, ks, v.clone()),
                Some(c) => scalar_decay_chunked(log_a.clone(), qs, ks, v.clone(), c),
            };
            let grads = (y.clone() * weights.clone()).sum().backward();
            (y.detach(), q.grad(&grads).unwrap(), k.grad(&grads).unwrap())
        };
        let (shared, copies) = (run(false), run(true));
        assert_eq!(shared.0.dims(), [batch, seq, heads, 1, p]);
        for (what, a, b) in [
            ("y", shared.0, copies.0),
            ("dq", shared.1, copies.1),
            ("dk", shared.2, copies.2),
        ] {
            let diff = max_abs_diff(a, b);
            assert!(diff < 1e-5, "chunk {chunk:?}: {what} off by {diff}");
        }
    }
}

/// Sequential and chunked delta rules agree on outputs and on the gradients of q, k, v, β and
/// g, with β up to 2 (negative eigenvalues) and a length that is not a multiple of the chunk.
#[test]
fn delta_rules_agree_on_outputs_and_gradients() {
    let device = Device::flex().autodiff();
    device.seed(5);
    let (batch, seq, h, key_dim, value_dim) = (2, 23, 2, 6, 5);
    let unit = |t: Tensor<4>| {
        let norm = t.clone().square().sum_dim(3).sqrt();
        t / norm
    };
    let normal =
        |shape: [usize; 4]| Tensor::<4>::random(shape, Distribution::Normal(0.0, 1.0), &device);
    let q = unit(normal([batch, seq, h, key_dim]));
    let k = unit(normal([batch, seq, h, key_dim]));
    let v = normal([batch, seq, h, value_dim]);
    let beta = Tensor::<3>::random([batch, seq, h], Distribution::Uniform(0.0, 2.0), &device);
    let g = Tensor::<3>::random([batch, seq, h], Distribution::Uniform(-1.5, 0.0), &device);
    let weights = normal([batch, seq, h, value_dim]);
    let run = |chunk: Option<usize>| {
        let inputs = DeltaRuleInputs {
            q: q.clone().detach().require_grad(),
            k: k.clone().detach().require_grad(),
            v: v.clone().detach().require_grad(),
            beta: beta.clone().detach().require_grad(),
            g: g.clone().detach().require_grad(),
        };
        let o = match chunk {
            None => delta_rule_sequential(&inputs),
            Some(c) => delta_rule_chunked(&inputs, c),
        };
        let grads = (o.clone() * weights.clone()).sum().backward();
        (
            o.detach(),
            [
                inputs.q.grad(&grads).unwrap(),
                inputs.k.grad(&grads).unwrap(),
                inputs.v.grad(&grads).unwrap(),
            ],
            [
                inputs.beta.grad(&grads).unwrap(),
                inputs.g.grad(&grads).unwrap(),
            ],
        )
    };
    let sequential = run(None);
    for chunk in [1, 4, 8, 64] {
        let chunked = run(Some(chunk));
        assert!(
            max_abs_diff(sequential.0.clone(), chunked.0) < 1e-4,
            "chunk {chunk}: o"
        );
        for (i, (a, b)) in sequential.1.iter().zip(chunked.1).enumerate() {
            assert!(max_abs_diff(a.clone(), b) < 1e-3, "chunk {chunk}: grad {i}");
        }
        for (i, (a, b)) in sequential.2.iter().zip(chunked.2).enumerate() {
            assert!(
                max_abs_diff(a.clone(), b) < 1e-3,
                "chunk {chunk}: grad β/g {i}"
            );
        }
    }
}

/// Whole Gated DeltaNet models give the same logits with either scan.
#[test]
fn gdn_models_agree_across_scans() {
    let device = Device::flex();
    for family in [Family::Gdn, Family::GdnPos] {
        let sequential = Model::init(&config(family, Scan::Sequential), &device).unwrap();
        let mut chunked = sequential.clone();
        if let Model::Gdn(gdn) = &mut chunked {
            for layer in &mut gdn.backbone.layers {
                (layer.attn.scan, layer.attn.chunk_size) = (Scan::Chunked, 4);
            }
        }
        let ids: Vec<i64> = (0..22).map(|i| (i * 977 % 20_480) as i64).collect();
        let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [2, 11]), &device);
        let (a, b) = (sequential.logits(ids.clone()), chunked.logits(ids));
        assert!(max_abs_diff(a, b) < 1e-4, "{family}");
    }
}

/// Whole Mamba models give the same logits with either scan.
#[test]
fn mamba_models_agree_across_scans() {
    let device = Device::flex();
    for (family, mimo) in [
        (Family::Mamba2, false),
        (Family::Mamba3, false),
        (Family::Mamba3, true),
    ] {
        device.seed(3);
        let mut config = ModelConfig::new(family, Size::D128);
        config.mamba3_mimo = mimo;
        config.scan = Scan::Sequential;
        let sequential = Model::init(&config, &device).unwrap().valid();
        let mut chunked = sequential.clone();
        if let Model::Mamba(mamba) = &mut chunked {
            for layer in &mut mamba.layers {
                match &mut layer.mixer {
                    Mixer::Mamba2(m) => (m.scan, m.chunk_size) = (Scan::Chunked, 4),
                    Mixer::Mamba3(m) => (m.scan, m.chunk_size) = (Scan::Chunked, 4),
                }
            }
        }
        let ids: Vec<i64> = (0..22).map(|i| (i * 977 % 20_480) as i64).collect();
        let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [2, 11]), &device);
        let (a, b) = (sequential.logits(ids.clone()), chunked.logits(ids));
        assert!(max_abs_diff(a, b) < 1e-4, "{family} mimo={mimo}");
    }
}

fn config(family: Family, scan: Scan) -> ModelConfig {
    let mut config = ModelConfig::new(family, Size::D128);
    config.scan = scan;
    config
}

/// The Mamba-2 mixer against an f64 loop over spec B.4's formulas: the in_proj split, the
/// causal conv with bias and SiLU, Δ and A, the state update, the D skip and the gate before
/// the norm. d = 64, so d_inner = 128 and 2 heads.
#[test]
fn mamba2_mixer_matches_spec_b4() {
    let device = Device::flex();
    let (d, seq) = (64, 3);
    let out_proj = cwm_models::torch_linear(128, d, false, &device);
    let mixer = Mamba2Mixer::init(d, out_proj, &config(Family::Mamba2, Scan::Chunked), &device);
    let x = Tensor::<3>::random([1, seq, d], Distribution::Normal(0.0, 1.0), &device);
    let (di, n, h, p) = (128, 128, 2, 64);
    let width = 2 * di + 2 * n + h;
    let u = host(mixer.in_proj.forward(x.clone())); // [seq, width]
    let conv_w = host(mixer.conv1d.weight.val()); // [C, 1, 4]
    let conv_b = host(mixer.conv1d.bias.as_ref().unwrap().val());
    let dt_bias = host(mixer.dt_bias.val());
    let a_log = host(mixer.a_log.val());
    let d_skip = host(mixer.d.val());
    let channels = di + 2 * n;
    let mut state = vec![vec![vec![0.0f64; n]; p]; h];
    let mut y_all = Vec::new();
    for t in 0..seq {
        let xbc: Vec<f64> = (0..channels)
            .map(|c| {
                let mut acc = conv_b[c];
                for tap in 0..4 {
                    let src = t as i64 - 3 + tap as i64;
                    if src >= 0 {
                        acc += conv_w[c * 4 + tap] * u[src as usize * width + di + c];
                    }
                }
                silu(acc)
            })
            .collect();
        let (xs, b, c) = (&xbc[..di], &xbc[di..di + n], &xbc[di + n..]);
        let mut y = vec![0.0; di];
        for head in 0..h {
            let dt = softplus(u[t * width + 2 * di + 2 * n + head] + dt_bias[head]);
            let decay = (dt * -a_log[head].exp()).exp();
            for i in 0..p {
                let xi = xs[head * p + i];
                for j in 0..n {
                    state[head][i][j] = decay * state[head][i][j] + dt * xi * b[j];
                }
                let read: f64 = (0..n).map(|j| state[head][i][j] * c[j]).sum();
                y[head * p + i] = read + d_skip[head] * xi;
            }
        }
        let gated: Vec<f64> = (0..di).map(|i| y[i] * silu(u[t * width + i])).collect();
        y_all.extend(rms_norm(&gated, 1e-5)); // norm weight is ones
    }
    let want = mixer.out_proj.forward(tensor(y_all, [1, seq, di], &device));
    for scan in [Scan::Sequential, Scan::Chunked] {
        let mut mixer = mixer.clone();
        mixer.scan = scan;
        let got = mixer.forward(x.clone());
        assert!(max_abs_diff(got, want.clone()) < 1e-4, "{scan:?}");
    }
}

/// One vector per rank.
type RankVectors = Vec<Vec<f64>>;

/// The Mamba-3 mixer's output computed by an f64 loop over spec B.4's forward: the in_proj
/// split, Δ, the data-dependent decay, trapezoid mixing, cumulative rotary angles on the first
/// 64 dims (adjacent pairs for SISO, `(i, i+32)` for MIMO), B/C norms and per-head biases, the
/// two-term state update summed over ranks, the D skip and the SiLU(z) gate; for MIMO the
/// value, gate and output projections `mimo_x`, `mimo_z`, `mimo_o`. d = 64, so d_inner = 128
/// and 2 heads. Returns `[1, seq, d]`.
fn mamba3_by_hand(mixer: &Mamba3Mixer, x: Tensor<3>, device: &Device) -> Tensor<3> {
    let [_, seq, _] = x.dims();
    let (di, n, h, p, s, r) = (128, 128, 2, 64, 32, mixer.rank);
    let mimo = mixer.mimo_x.is_some();
    let width = 2 * di + 2 * n * r + 3 * h + s;
    let u = host(mixer.in_proj.forward(x));
    let dt_bias = host(mixer.dt_bias.val());
    let (b_bias, c_bias) = (host(mixer.b_bias.val()), host(mixer.c_bias.val())); // [h, r, n]
    let d_skip = host(mixer.d.val());
    let ones = vec![1.0; h * r * p];
    let param = |t: &Option<burn::module::Param<Tensor<3>>>| {
        t.as_ref().map_or(ones.clone(), |t| host(t.val()))
    }; // [h, r, p]
    let (mimo_x, mimo_z, mimo_o) = (
        param(&mixer.mimo_x),
        param(&mixer.mimo_z),
        param(&mixer.mimo_o),
    );
    let at = |t: usize, i: usize| u[t * width + i];
    let mut state = vec![vec![vec![0.0f64; n]; p]; h];
    let mut theta = vec![vec![0.0f64; s]; h];
    // Per head: the previous step's values and keys, per rank.
    let mut prev: Vec<Option<(RankVectors, RankVectors)>> = vec![None; h];
    let mut y_all = Vec::new();
    for t in 0..seq {
        let normed = |offset: usize, rank: usize| {
            let raw: Vec<f64> = (0..n).map(|j| at(t, offset + rank * n + j)).collect();
            rms_norm(&raw, 1e-5)
        };
        let mut y = vec![0.0; di];
        for head in 0..h {
            let base = 2 * di + 2 * n * r;
            let dt = softplus(at(t, base + head) + dt_bias[head]);
            let a = (-softplus(at(t, base + h + head))).min(-1e-4);
            let alpha = (a * dt).exp();
            let lambda = sigmoid(at(t, base + 2 * h + head));
            for (i, angle) in theta[head].iter_mut().enumerate() {
                *angle += std::f64::consts::PI * at(t, base + 3 * h + i).tanh() * dt;
            }
            let rot = |vec: Vec<f64>| -> Vec<f64> {
                let mut out = vec.clone();
                for (i, angle) in theta[head].iter().enumerate() {
                    let (sin, cos) = angle.sin_cos();
                    let (ia, ib) = if mimo { (i, i + s) } else { (2 * i, 2 * i + 1) };
                    out[ia] = vec[ia] * cos - vec[ib] * sin;
                    out[ib] = vec[ia] * sin + vec[ib] * cos;
                }
                out
            };
            let bias = |b: &[f64], rank: usize, j: usize| b[(head * r + rank) * n + j];
            let ks: Vec<Vec<f64>> = (0..r)
                .map(|rank| {
                    let normed = normed(2 * di, rank);
                    rot((0..n).map(|j| normed[j] + bias(&b_bias, rank, j)).collect())
                })
                .collect();
            let qs: Vec<Vec<f64>> = (0..r)
                .map(|rank| {
                    let normed = normed(2 * di + n * r, rank);
                    rot((0..n).map(|j| normed[j] + bias(&c_bias, rank, j)).collect())
                })
                .collect();
            let hrp = |rank: usize, i: usize| (head * r + rank) * p + i;
            let vs: Vec<Vec<f64>> = (0..r)
                .map(|rank| {
                    (0..p)
                        .map(|i| at(t, di + head * p + i) * mimo_x[hrp(rank, i)])
                        .collect()
                })
                .collect();
            for i in 0..p {
                for j in 0..n {
                    let mut next = alpha * state[head][i][j];
                    for rank in 0..r {
                        next += lambda * dt * vs[rank][i] * ks[rank][j];
                        if let Some((pv, pk)) = &prev[head] {
                            next += (1.0 - lambda) * dt * alpha * pv[rank][i] * pk[rank][j];
                        }
                    }
                    state[head][i][j] = next;
                }
                let z = at(t, head * p + i);
                for rank in 0..r {
                    let read: f64 = (0..n).map(|j| state[head][i][j] * qs[rank][j]).sum();
                    let y_r = (read + d_skip[head] * vs[rank][i]) * silu(z * mimo_z[hrp(rank, i)]);
                    y[head * p + i] += mimo_o[hrp(rank, i)] * y_r;
                }
            }
            prev[head] = Some((vs, ks));
        }
        y_all.extend(y);
    }
    mixer.out_proj.forward(tensor(y_all, [1, seq, di], device))
}

/// The Mamba-3 mixer, SISO and MIMO rank 3 (with perturbed biases and MIMO projections, so
/// heads and ranks differ), against [`mamba3_by_hand`], with both scans.
#[test]
fn mamba3_mixer_matches_spec_b4() {
    let device = Device::flex();
    let (d, seq) = (64, 4);
    for mimo in [false, true] {
        let mut config = config(Family::Mamba3, Scan::Chunked);
        config.mamba3_mimo = mimo;
        config.mamba3_mimo_rank = 3;
        let out_proj = cwm_models::torch_linear(128, d, false, &device);
        let mut mixer = Mamba3Mixer::init(d, out_proj, &config, &device);
        let perturb = |t: Tensor<3>| t.clone() + t.random_like(Distribution::Normal(0.0, 0.5));
        mixer.b_bias = mixer.b_bias.map(perturb);
        mixer.c_bias = mixer.c_bias.map(perturb);
        mixer.mimo_x = mixer.mimo_x.map(|m| m.map(perturb));
        mixer.mimo_z = mixer.mimo_z.map(|m| m.map(perturb));
        mixer.mimo_o = mixer.mimo_o.map(|m| m.map(perturb));
        assert_eq!(mixer.rank, if mimo { 3 } else { 1 });
        let x = Tensor::<3>::random([1, seq, d], Distribution::Normal(0.0, 1.0), &device);
        let want = mamba3_by_hand(&mixer, x.clone(), &device);
        for scan in [Scan::Sequential, Scan::Chunked] {
            let mut mixer = mixer.clone();
            mixer.scan = scan;
            mixer.chunk_size = 3;
            let got = mixer.forward(x.clone());
            assert!(
                max_abs_diff(got, want.clone()) < 1e-4,
                "mimo={mimo} {scan:?}"
            );
        }
    }
}

/// Rotations keep norms and leave the unrotated half alone, in both pairings.
#[test]
fn rotary_pairings() {
    let device = Device::flex();
    let x = Tensor::<5>::random([1, 2, 2, 1, 128], Distribution::Normal(0.0, 1.0), &device);
    let theta = Tensor::<4>::random([1, 2, 2, 32], Distribution::Uniform(-3.0, 3.0), &device);
    for pairing in [Pairing::Adjacent, Pairing::Halves] {
        let out = rotate(x.clone(), theta.clone(), pairing);
        let norm = |t: Tensor<5>| host(t.narrow(4, 0, 64).square().sum());
        assert!((norm(out.clone())[0] - norm(x.clone())[0]).abs() < 1e-3);
        assert_eq!(
            max_abs_diff(out.clone().narrow(4, 64, 64), x.clone().narrow(4, 64, 64)),
            0.0
        );
        assert!(max_abs_diff(out, x.clone()) > 1e-2);
    }
}

/// Mamba re-init: `out_proj` and `fc2` inside U(±1/√fan_in)/√(2L), head bias zero, mixer
/// parameters at their documented values.
#[test]
fn mamba_inits_follow_spec_b4() {
    let device = Device::flex();
    let config = ModelConfig::new(Family::Mamba3, Size::D256);
    let Model::Mamba(model) = Model::init(&config, &device).unwrap() else {
        panic!("mamba3 builds a Mamba model");
    };
    let two_l = (2 * config.n_layers()) as f64;
    let max_abs = |t: Tensor<2>| host(t.abs().max())[0];
    for layer in &model.layers {
        let bound = 1.0 / (4.0 * 256f64).sqrt() / two_l.sqrt();
        let fc2 = max_abs(layer.mlp.fc2.weight.val());
        assert!(fc2 <= bound && fc2 > 0.9 * bound, "fc2 {fc2} vs {bound}");
        let Mixer::Mamba3(mixer) = &layer.mixer else {
            panic!("mamba3 mixer");
        };
        let bound = 1.0 / 512f64.sqrt() / two_l.sqrt();
        let out = max_abs(mixer.out_proj.weight.val());
        assert!(
            out <= bound && out > 0.9 * bound,
            "out_proj {out} vs {bound}"
        );
        assert!(host(mixer.b_bias.val()).iter().all(|&b| b == 1.0));
        assert!(host(mixer.d.val()).iter().all(|&b| b == 1.0));
        assert!(mixer.mimo_x.is_none());
    }
    let bias = model.output_head.bias.as_ref().unwrap().val();
    assert_eq!(host(bias.abs().max())[0], 0.0);
}
