//! The loss of the induction task: closed form (T-4, T-6, T-7) against the literal vector
//! model and the spec's cross-check, analytic gradients (T-5, T-6g, T-8, T-11) against
//! central finite differences, vocabulary geometry (T-1) and parameter validation.

use crate::common;

use common::*;
use phasekv::theory::flow::{ContentOptions, FlowConfig, FlowState};
use phasekv::theory::task::*;
use phasekv::theory::vocab::Vocabulary;
use phasekv::Error;
use proptest::prelude::*;

/// Closed form vs literal vector model at eps = 0 (spec §6: < 1e-10).
const CLOSED_VS_LITERAL: f64 = 1e-10;
/// Analytic vs central finite-difference gradient (spec §6: relative error < 1e-4).
const FD_REL: f64 = 1e-4;
/// Static closed form vs oracle with replicated gates (spec §6: < 1e-12).
const STATIC_VS_ORACLE: f64 = 1e-12;
const FD_STEP: f64 = 1e-6;

fn cross_check_params() -> TaskParams {
    TaskParams { stride: 4, heads: 2, chunks: 4, vocab: 64, beta: 2.0, gamma: 2.0, kappa: 1.0 }
}

#[test]
fn f1_matches_spec_cross_check_and_oracle_loss() {
    let p = cross_check_params();
    let f1 = one_hot_loss(&p).unwrap();
    assert!((f1 - 3.299902447536).abs() < 1e-11, "F_1 = {f1}");
    // The closed form of F_1 (T-7) is the oracle loss (T-4) at a distinct vertex, including
    // assignments that differ from chunk to chunk.
    for offsets in [vec![vec![0; 4], vec![1; 4]], vec![vec![0, 1, 2, 0], vec![2, 0, 1, 1]]] {
        let g = OracleGates::one_hot(&p, &offsets).unwrap();
        let f = population_loss(&p, &g).unwrap();
        assert!((f - f1).abs() < 1e-12, "vertex loss {f} vs F_1 {f1}");
    }
    // One colliding pair (both heads on offset 1 in every chunk): spec value 3.359596.
    let g = OracleGates::one_hot(&p, &[vec![0, 0, 0, 0], vec![0, 0, 0, 0]]).unwrap();
    let f = population_loss(&p, &g).unwrap();
    assert!((f - 3.359596).abs() < 5e-7, "colliding pair {f}");
    // A collision in a single chunk costs less, but still more than F_1.
    let g1 = OracleGates::one_hot(&p, &[vec![0, 0, 0, 0], vec![0, 1, 1, 1]]).unwrap();
    let f_one_chunk = population_loss(&p, &g1).unwrap();
    assert!(f1 < f_one_chunk && f_one_chunk < f, "{f1} < {f_one_chunk} < {f}");
}

#[test]
fn vocabulary_exact_gram_and_errors() {
    for (n, kappa, dim) in [(8, 1.0, None), (8, 0.5, Some(8)), (12, 2.0, Some(20))] {
        let v = Vocabulary::exact(n, kappa, dim).unwrap();
        let g = v.gram();
        for i in 0..n {
            for j in 0..n {
                let want = kappa + if i == j { 1.0 } else { 0.0 };
                assert!((g[(i, j)] - want).abs() < 1e-12, "Gram[{i},{j}] = {}", g[(i, j)]);
            }
        }
        assert!(v.eps < 1e-12);
    }
    assert!(matches!(Vocabulary::exact(8, 1.0, Some(7)), Err(Error::Invalid { field, .. }) if field == "dim"));
    assert!(matches!(Vocabulary::exact(8, 0.0, None), Err(Error::Invalid { field, .. }) if field == "kappa"));
    assert!(matches!(Vocabulary::exact(8, -1.0, None), Err(Error::Invalid { field, .. }) if field == "kappa"));
}

#[test]
fn task_params_reject_impossible_requests() {
    let ok = TaskParams::default();
    ok.validate().unwrap();
    let cases: Vec<(TaskParams, &str)> = vec![
        (TaskParams { heads: 4, ..ok }, "heads"),
        (TaskParams { heads: 0, ..ok }, "heads"),
        (TaskParams { vocab: 15, ..ok }, "vocab"),
        (TaskParams { beta: 0.0, ..ok }, "beta"),
        (TaskParams { gamma: -1.0, ..ok }, "gamma"),
        (TaskParams { kappa: 0.0, ..ok }, "kappa"),
        (TaskParams { chunks: 1, ..ok }, "chunks"),
    ];
    for (p, field) in cases {
        match p.validate() {
            Err(Error::Invalid { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{p:?}: expected invalid {field}, got {other:?}"),
        }
    }
}

proptest! {
    #![proptest_config(macro_config("theory-loss", 24, "proptest-regressions/theory_loss.txt"))]

    /// Random vocabularies report the eps they achieve, and the same seed gives the same
    /// vocabulary.
    #[test]
    fn random_vocabulary_reports_achieved_eps(n in 4usize..40, dim in 3usize..60, kappa in 0.1f64..3.0, seed in any::<u64>()) {
        let v = Vocabulary::random(n, kappa, dim, seed).unwrap();
        let w = Vocabulary::random(n, kappa, dim, seed).unwrap();
        prop_assert_eq!(&v.embeddings, &w.embeddings);
        let g = v.gram();
        let mut m = 0.0f64;
        for i in 0..n { for j in 0..n { if i != j { m = m.max((g[(i, j)] - kappa).abs()); } } }
        prop_assert!((v.eps - m).abs() < 1e-12, "reported {} vs measured {}", v.eps, m);
        for i in 0..n { prop_assert!((g[(i, i)] - kappa - 1.0).abs() < 1e-12); }
        prop_assert!(v.eps > 0.0 && v.eps <= 1.0);
    }

    /// The closed form (T-4) equals the literal vector model at eps = 0 in every context,
    /// so the Monte Carlo estimate has zero spread; and kappa cancels.
    #[test]
    fn monte_carlo_equals_closed_form_at_eps0((p, g) in params_and_gates(), seed in any::<u64>()) {
        let closed = population_loss(&p, &g).unwrap();
        let v = Vocabulary::exact(p.vocab, p.kappa, None).unwrap();
        let mc = monte_carlo_loss(&p, &v, &g, 3, seed).unwrap();
        prop_assert!((mc.mean - closed).abs() < CLOSED_VS_LITERAL, "MC {} closed {}", mc.mean, closed);
        prop_assert!(mc.std_err < CLOSED_VS_LITERAL);
        let p2 = TaskParams { kappa: p.kappa * 3.7, ..p };
        let v2 = Vocabulary::exact(p.vocab, p2.kappa, None).unwrap();
        let mc2 = monte_carlo_loss(&p2, &v2, &g, 1, seed).unwrap();
        prop_assert!((mc2.mean - mc.mean).abs() < CLOSED_VS_LITERAL, "kappa moved F: {} vs {}", mc2.mean, mc.mean);
    }

    /// Oracle gradient (T-5) against central finite differences.
    #[test]
    fn oracle_gradient_matches_finite_differences((p, g) in params_and_gates()) {
        let (_, gk, gv) = population_loss_grad(&p, &g).unwrap();
        for which in 0..2 {
            for i in 0..g.key.len() {
                let mut plus = g.clone();
                let mut minus = g.clone();
                if which == 0 { plus.key[i] += FD_STEP; minus.key[i] -= FD_STEP; } else { plus.value[i] += FD_STEP; minus.value[i] -= FD_STEP; }
                let fd = (population_loss(&p, &plus).unwrap() - population_loss(&p, &minus).unwrap()) / (2.0 * FD_STEP);
                let an = if which == 0 { gk[i] } else { gv[i] };
                prop_assert!(rel_err(an, fd, 1e-3) < FD_REL, "{} entry {}: analytic {} fd {}", if which == 0 { "pK" } else { "pV" }, i, an, fd);
            }
        }
    }

    /// Static closed form (T-6) equals the oracle loss with replicated gates; its gradient
    /// (T-6g) equals the chunk-sum of the oracle gradient and central finite differences.
    #[test]
    fn static_form_matches_oracle_and_finite_differences((p, key, value) in params_and_static()) {
        let mut ws = StaticWorkspace::new(p.heads, p.stride);
        let n = p.heads * p.stride;
        let (mut gk, mut gv) = (vec![0.0; n], vec![0.0; n]);
        let f = static_loss_grad(&p, &key, &value, &mut ws, Some((&mut gk, &mut gv)));
        let og = OracleGates::from_static(&p, &key, &value);
        let (fo, ok, ov) = population_loss_grad(&p, &og).unwrap();
        prop_assert!((f - fo).abs() < STATIC_VS_ORACLE, "static {} oracle {}", f, fo);
        for h in 0..p.heads { for r in 0..p.stride {
            let sk: f64 = (0..p.chunks).map(|l| ok[og.idx(h, l, r)]).sum();
            let sv: f64 = (0..p.chunks).map(|l| ov[og.idx(h, l, r)]).sum();
            prop_assert!(rel_err(gk[h * p.stride + r], sk, 1e-8) < 1e-9, "pK grad {} vs {}", gk[h * p.stride + r], sk);
            prop_assert!(rel_err(gv[h * p.stride + r], sv, 1e-8) < 1e-9, "pV grad {} vs {}", gv[h * p.stride + r], sv);
        }}
        for i in 0..n {
            for which in 0..2 {
                let (mut kp, mut km, mut vp, mut vm) = (key.clone(), key.clone(), value.clone(), value.clone());
                if which == 0 { kp[i] += FD_STEP; km[i] -= FD_STEP; } else { vp[i] += FD_STEP; vm[i] -= FD_STEP; }
                let fd = (static_loss_grad(&p, &kp, &vp, &mut ws, None) - static_loss_grad(&p, &km, &vm, &mut ws, None)) / (2.0 * FD_STEP);
                let an = if which == 0 { gk[i] } else { gv[i] };
                prop_assert!(rel_err(an, fd, 1e-3) < FD_REL, "static entry {}: analytic {} fd {}", i, an, fd);
            }
        }
    }

    /// The flow's logit gradient (T-6g through the softmax, T-8) against finite differences
    /// of the static loss in logit space.
    #[test]
    fn flow_logit_gradient_matches_finite_differences(p in task_params(), seed in any::<u64>()) {
        let cfg = FlowConfig { params: p, sigma: 0.7, ..FlowConfig::default() };
        let mut st = FlowState::new(&cfg, seed).unwrap();
        let theta = st.theta().to_vec();
        let mut g = vec![0.0; theta.len()];
        st.loss_grad_at(&theta, &mut g);
        let mut scratch = vec![0.0; theta.len()];
        for i in 0..theta.len() {
            let (mut tp, mut tm) = (theta.clone(), theta.clone());
            tp[i] += FD_STEP; tm[i] -= FD_STEP;
            let fd = (st.loss_grad_at(&tp, &mut scratch) - st.loss_grad_at(&tm, &mut scratch)) / (2.0 * FD_STEP);
            prop_assert!(rel_err(g[i], fd, 1e-3) < FD_REL, "logit {}: analytic {} fd {}", i, g[i], fd);
        }
    }
}

proptest! {
    #![proptest_config(macro_config("theory-loss-content", 6, "proptest-regressions/theory_loss.txt"))]

    /// Content term (T-11): at w = 0 the sample gradient in w vanishes (the population's
    /// does) and the theta part equals the static gradient; at w != 0 it matches finite
    /// differences.
    #[test]
    fn content_gradient(seed in any::<u64>(), beta in 0.5f64..4.0, gamma in 0.5f64..4.0) {
        let p = TaskParams { stride: 3, heads: 2, chunks: 2, vocab: 8, beta, gamma, kappa: 1.0 };
        let cfg = FlowConfig { params: p, sigma: 0.5, content: Some(ContentOptions { base_contexts: 1, init_scale: 0.0 }), ..FlowConfig::default() };
        let mut st = FlowState::new(&cfg, seed).unwrap();
        let theta = st.theta().to_vec();
        let mut g = vec![0.0; theta.len()];
        st.loss_grad_at(&theta, &mut g);
        let hs = p.heads * p.stride;
        let wmax = g[2 * hs..].iter().fold(0.0f64, |m, x| m.max(x.abs()));
        prop_assert!(wmax < 1e-12, "grad_w at w = 0 is {}", wmax);
        let static_cfg = FlowConfig { content: None, ..cfg };
        let mut st0 = FlowState::new(&static_cfg, seed).unwrap();
        let mut g0 = vec![0.0; 2 * hs];
        st0.loss_grad_at(&theta[..2 * hs], &mut g0);
        for i in 0..2 * hs { prop_assert!((g[i] - g0[i]).abs() < 1e-12, "theta grad {} vs static {}", g[i], g0[i]); }
        // Away from w = 0: finite differences.
        let cfg_w = FlowConfig { content: Some(ContentOptions { base_contexts: 1, init_scale: 0.5 }), ..cfg };
        let mut stw = FlowState::new(&cfg_w, seed).unwrap();
        let tw = stw.theta().to_vec();
        let mut gw = vec![0.0; tw.len()];
        stw.loss_grad_at(&tw, &mut gw);
        let mut scratch = vec![0.0; tw.len()];
        for i in (0..tw.len()).step_by(3) {
            let (mut tp, mut tm) = (tw.clone(), tw.clone());
            tp[i] += FD_STEP; tm[i] -= FD_STEP;
            let fd = (stw.loss_grad_at(&tp, &mut scratch) - stw.loss_grad_at(&tm, &mut scratch)) / (2.0 * FD_STEP);
            prop_assert!(rel_err(gw[i], fd, 1e-3) < FD_REL, "content logit {}: analytic {} fd {}", i, gw[i], fd);
        }
    }
}
