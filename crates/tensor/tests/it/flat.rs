//! [`FlatBuffer`]: a layer's gradients written in place into one flat buffer, bit for
//! bit what separate gradient tensors receive.

use brrr_cpu::CpuBackend;
use brrr_tensor::{Backend, DType, FlatBuffer, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn rand_t(cpu: &CpuBackend, rng: &mut ChaCha8Rng, dims: &[usize]) -> Tensor<CpuBackend> {
    let n: usize = dims.iter().product();
    let v: Vec<f64> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    Tensor::from_f64(cpu, &v, dims.to_vec(), DType::F32).unwrap()
}

/// The gradients of a linear layer, a LayerNorm and an embedding, accumulated over two
/// micro-batches into one flat buffer (GEMMs, the scatter-add and the bias's axpy write
/// into their parts in place) and into tensors of their own: the same bits, and the
/// flat buffer is one allocation that the writes never copy.
#[test]
fn gradients_written_into_one_flat_buffer_match_separate_tensors() {
    let cpu = CpuBackend::new();
    let mut rng = ChaCha8Rng::seed_from_u64(91);
    let (rows, k, n, vocab) = (12, 16, 24, 10);
    let parts = [
        ("wte", vec![vocab, k]),
        ("ln.gamma", vec![k]),
        ("ln.beta", vec![k]),
        ("fc.weight", vec![n, k]),
        ("fc.bias", vec![n]),
    ];
    let mut flat = FlatBuffer::zeros(&cpu, DType::F32, parts.clone()).unwrap();
    let mut own: Vec<Tensor<CpuBackend>> = parts
        .iter()
        .map(|(_, d)| Tensor::zeros(&cpu, d.clone(), DType::F32).unwrap())
        .collect();
    let gamma = rand_t(&cpu, &mut rng, &[k]);
    for _micro_batch in 0..2 {
        let ids = Tensor::from_f64(
            &cpu,
            &(0..rows)
                .map(|_| rng.random_range(0..vocab) as f64)
                .collect::<Vec<_>>(),
            [rows],
            DType::U32,
        )
        .unwrap();
        let (x, dy) = (
            rand_t(&cpu, &mut rng, &[rows, k]),
            rand_t(&cpu, &mut rng, &[rows, n]),
        );
        let d_emb = rand_t(&cpu, &mut rng, &[rows, k]);
        let dln = rand_t(&cpu, &mut rng, &[rows, k]);
        let (_, stats) = x.layernorm(&gamma, &gamma, 1e-5).unwrap();
        let dyt = dy.transpose(0, 1).unwrap();
        let db = dy.sum_dim(0, false).unwrap();

        ids.embedding_backward(&d_emb, &mut own[0]).unwrap();
        let [_, g, b, ..] = &mut own[..] else {
            unreachable!()
        };
        x.layernorm_backward(&dln, &gamma, &stats, 1e-5, g, b)
            .unwrap();
        Tensor::matmul_into(&mut own[3], &dyt, &x, 1.0, 1.0).unwrap();
        own[4].add_(&db).unwrap();

        let before = cpu.memory_stats();
        cpu.reset_peak_memory();
        flat.with_part(0, |t| ids.embedding_backward(&d_emb, t))
            .unwrap();
        flat.with_part(3, |w| Tensor::matmul_into(w, &dyt, &x, 1.0, 1.0))
            .unwrap();
        flat.with_part(4, |bias| bias.add_(&db)).unwrap();
        let after = cpu.memory_stats();
        assert_eq!(
            after.peak_bytes, before.bytes_in_use,
            "a write copied its part"
        );
        // LayerNorm's two small gradients come from one kernel call, so one of them is
        // always a second part: they go through temporaries, added in place.
        let mut tg = Tensor::zeros(&cpu, [k], DType::F32).unwrap();
        let mut tb = Tensor::zeros(&cpu, [k], DType::F32).unwrap();
        x.layernorm_backward(&dln, &gamma, &stats, 1e-5, &mut tg, &mut tb)
            .unwrap();
        flat.with_part(1, |g| g.add_(&tg)).unwrap();
        flat.with_part(2, |b| b.add_(&tb)).unwrap();
    }
    for (i, (name, _)) in parts.iter().enumerate() {
        assert_eq!(
            flat.view(i).unwrap().to_vec_f32().unwrap(),
            own[i].to_vec_f32().unwrap(),
            "{name}"
        );
    }
    assert_eq!(flat.range(3).unwrap().offset, vocab * k + 2 * k);

    // While a reading view is alive the buffer is shared: a write is refused, by name,
    // and the buffer is still there afterwards.
    let reader = flat.view(4).unwrap();
    let e = flat.with_part(4, |bias| bias.add_(&reader)).unwrap_err();
    assert!(
        e.to_string().contains("axpy") && e.to_string().contains("shared"),
        "{e}"
    );
    drop(reader);
    let twice = own[4].add(&own[4]).unwrap();
    flat.with_part(4, |bias| bias.add_(&own[4])).unwrap();
    assert_eq!(
        flat.view(4).unwrap().to_vec_f32().unwrap(),
        twice.to_vec_f32().unwrap()
    );
    assert!(flat.with_part(9, |_| Ok(())).is_err(), "part 9 of 5");
}

/// `fill_` on a lent part (zeroing one parameter's gradient) writes that part only,
/// without a copy; a strided view is refused, and so is a shared buffer.
#[test]
fn filling_one_part_leaves_the_others() {
    let cpu = CpuBackend::new();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let parts = [("a", vec![3, 4]), ("b", vec![5]), ("c", vec![2, 3])];
    for dtype in [DType::F32, DType::F16, DType::BF16, DType::F64] {
        let mut flat = FlatBuffer::zeros(&cpu, dtype, parts.clone()).unwrap();
        let all = rand_t(&cpu, &mut rng, &[23]).to_dtype(dtype).unwrap();
        flat.whole_mut().unwrap().add_(&all).unwrap();
        let before = flat.whole().unwrap().to_vec_f64().unwrap();
        cpu.reset_peak_memory();
        let in_use = cpu.memory_stats().bytes_in_use;
        flat.with_part(1, |b| b.fill_(0.0)).unwrap();
        // The broadcast source is one element; nothing the size of a part is allocated.
        assert!(
            cpu.memory_stats().peak_bytes <= in_use + 8,
            "{dtype}: filling copied"
        );
        flat.with_part(2, |c| c.fill_(-2.5)).unwrap();
        let after = flat.whole().unwrap().to_vec_f64().unwrap();
        assert_eq!(after[..12], before[..12], "{dtype}: part a changed");
        assert_eq!(after[12..17], [0.0; 5], "{dtype}: part b");
        assert_eq!(after[17..], [-2.5; 6], "{dtype}: part c");
    }
    let mut flat = FlatBuffer::zeros(&cpu, DType::F32, parts.clone()).unwrap();
    let e = flat
        .with_part(0, |a| a.transpose(0, 1)?.fill_(1.0))
        .unwrap_err();
    assert!(e.to_string().contains("fill_"), "{e}");
    let reader = flat.view(0).unwrap();
    assert!(
        flat.with_part(1, |b| b.fill_(1.0)).is_err(),
        "shared buffer"
    );
    drop(reader);
    assert_eq!(flat.view(1).unwrap().to_vec_f32().unwrap(), [0.0; 5]);
}

/// `Tensor::sum_squares` of each part of a flat buffer: bitwise the composite
/// (`to_dtype(F32)`, `square`, `sum_all`) in f32, f16 and bf16, with no temporary on
/// brrr-cpu: the part is read in place and only the one-element result is allocated.
#[test]
fn sum_squares_reads_a_flat_part_in_place_and_matches_the_composite() {
    let cpu = CpuBackend::new();
    let mut rng = ChaCha8Rng::seed_from_u64(92);
    let parts = [("a", vec![37, 29]), ("b", vec![1000]), ("c", vec![3, 5, 7])];
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let mut flat = FlatBuffer::zeros(&cpu, dtype, parts.clone()).unwrap();
        for (i, (_, dims)) in parts.iter().enumerate() {
            let v = rand_t(&cpu, &mut rng, dims).to_dtype(dtype).unwrap();
            flat.with_part(i, |t| t.add_(&v)).unwrap();
        }
        for i in 0..parts.len() {
            let part = flat.view(i).unwrap();
            let want = part
                .to_dtype(DType::F32)
                .unwrap()
                .square()
                .unwrap()
                .sum_all()
                .unwrap();
            let before = cpu.memory_stats();
            cpu.reset_peak_memory();
            let got = part.sum_squares().unwrap();
            assert_eq!(
                cpu.memory_stats().peak_bytes,
                before.bytes_in_use + 4,
                "{dtype:?} part {i}: a temporary was made"
            );
            assert_eq!(got.dtype(), DType::F32);
            assert_eq!(
                got.to_vec_f32().unwrap()[0].to_bits(),
                want.to_vec_f32().unwrap()[0].to_bits(),
                "{dtype:?} part {i}"
            );
        }
    }
    let empty = Tensor::zeros(&cpu, [0, 4], DType::F32).unwrap();
    assert_eq!(empty.sum_squares().unwrap().to_vec_f32().unwrap(), [0.0]);
}
