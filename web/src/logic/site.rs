//! The site map: every demo page, where it lives, which book chapter and which crates it
//! shows. The landing page, the navigation bar and the router all read this one table,
//! so a new page is a module, a row here and a route.

/// A demo page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageId {
    /// GPU × op × dtype on the roofline, with tile and wave quantization.
    Roofline,
    /// Per-GPU training memory under ZeRO and 3D parallelism.
    Memory,
    /// Choosing a parallel layout: every dp × tp × pp that fits, ranked (brrr-perf's planner).
    Plan,
    /// brrr-wgpu's kernels timed on the reader's GPU.
    Kernels,
    /// A small GPT trained by brrr-train in the page.
    Train,
    /// The book's GPU puzzles: WGSL kernels edited and run on WebGPU in the page.
    Puzzles,
    /// Activation recomputation: brrr-checkpoint's schedules and their memory curves.
    Checkpointing,
    /// An all-reduce run step by step by brrr-collectives' algorithms.
    Collectives,
    /// Number formats bit by bit, and the loss scale of an fp16 run (brrr-amp).
    MixedPrecision,
    /// Prefetching on a timeline, packing and balance (brrr-data).
    DataLoading,
    /// How tensor parallelism splits a block, what each rank holds and sends.
    TensorParallel,
    /// Where a training step's time goes: brrr-profile's tables and timeline of a trace.
    Profile,
    /// Pipeline schedules from brrr-pp: timeline, bubble and memory.
    Pipeline,
    /// Data parallelism (brrr-dp): bucket all-reduces under the backward, ZeRO memory.
    DataParallel,
    /// Continuous batching, paged KV blocks and prefix caching (brrr-serve's scheduler).
    Serving,
}

/// What the site says about a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageInfo {
    /// The page.
    pub id: PageId,
    /// The route's path, after the `#`.
    pub path: &'static str,
    /// Title, in the navigation bar and on the page.
    pub title: &'static str,
    /// One sentence for the landing page.
    pub blurb: &'static str,
    /// The book chapter that explains it, relative to the book's root (`/book/`).
    pub chapter: &'static str,
    /// The crates whose code produces its numbers (their docs are linked).
    pub crates: &'static [&'static str],
}

/// Every demo page, in the order the landing page lists them.
pub const PAGES: [PageInfo; 15] = [
    PageInfo {
        id: PageId::Roofline,
        path: "/roofline",
        title: "Roofline explorer",
        blurb: "Pick a GPU, an op and a dtype: see its arithmetic intensity on the roofline, \
                whether it is compute- or memory-bound, its predicted time, and how tile and \
                wave quantization punish awkward sizes (why GPT-2's vocabulary 50257 becomes 50304).",
        chapter: "regimes.html",
        crates: &["brrr_perf"],
    },
    PageInfo {
        id: PageId::Memory,
        path: "/memory",
        title: "Memory calculator",
        blurb: "A transformer, a precision, an optimizer, a ZeRO stage and data/tensor/pipeline \
                degrees: the weights, gradients, optimizer state and activations one GPU holds, \
                against its capacity.",
        chapter: "memory.html",
        crates: &["brrr_perf"],
    },
    PageInfo {
        id: PageId::Plan,
        path: "/plan",
        title: "Layout planner",
        blurb: "A model, a number of GPUs and a batch: every data × tensor × pipeline layout \
                with its ZeRO stage, recomputation and micro-batches that fits, ranked by \
                predicted step time, with what limits each and why the rest do not fit.",
        chapter: "planning.html",
        crates: &["brrr_perf"],
    },
    PageInfo {
        id: PageId::Kernels,
        path: "/kernels",
        title: "Kernels live",
        blurb: "brrr's WGSL kernels on your GPU through WebGPU: four matmul versions from naive \
                to vectorised, memory-bound kernels in GB/s, fused against unfused GELU, the \
                overhead of many tiny dispatches, and brrr-cpu's fused attention against the \
                composite path (time and memory kept as the context grows).",
        chapter: "kernels.html",
        crates: &["brrr_wgpu", "brrr_cpu", "brrr_perf"],
    },
    PageInfo {
        id: PageId::Train,
        path: "/train",
        title: "Train in the browser",
        blurb: "A small GPT learns the State of the Union addresses in this tab: brrr-train's \
                Trainer on WebGPU (or the CPU), a live loss curve, tokens per second, and \
                samples from the model as it learns.",
        chapter: "training.html",
        crates: &["brrr_train", "brrr_nn", "brrr_wgpu", "brrr_cpu"],
    },
    PageInfo {
        id: PageId::Puzzles,
        path: "/puzzles",
        title: "GPU puzzles",
        blurb: "Seventeen small WGSL kernels, from a map to a tiled matmul and a transpose: edit one in the page, \
                run it on your GPU through WebGPU, and see its output cell by cell against the \
                CPU reference, with compile errors where they happen.",
        chapter: "puzzles.html",
        crates: &["brrr_exercises", "brrr_wgpu"],
    },
    PageInfo {
        id: PageId::Checkpointing,
        path: "/checkpointing",
        title: "Activation recomputation",
        blurb: "A GPT shape and a strategy (none, every K-th, √n, selective, or the optimal \
                schedule for a memory budget): which segments the forward keeps, the memory \
                through forward and backward, and the extra compute recomputation costs.",
        chapter: "checkpointing.html",
        crates: &["brrr_checkpoint"],
    },
    PageInfo {
        id: PageId::Collectives,
        path: "/collectives",
        title: "Collectives",
        blurb: "An all-reduce step by step on real buffers: ring, tree, double binary tree, \
                recursive halving-doubling or naive, 2 to 8 ranks, which chunk each rank sends \
                where, the result checked against the reference sum, and the steps and bytes \
                beside the alpha-beta model.",
        chapter: "collectives.html",
        crates: &["brrr_collectives", "brrr_perf"],
    },
    PageInfo {
        id: PageId::MixedPrecision,
        path: "/mixed-precision",
        title: "Mixed precision",
        blurb: "Type a number and see its f32, f16 and bf16 bits, the value each stores, the \
                relative error and where each format overflows or flushes to zero; then watch \
                the loss scale of a real fp16 run back off on overflows and climb again.",
        chapter: "mixed-precision.html",
        crates: &["brrr_amp", "brrr_train"],
    },
    PageInfo {
        id: PageId::DataLoading,
        path: "/data-loading",
        title: "Data loading",
        blurb: "The loader and the training step on a timeline, with prefetching off and on: \
                set how long a batch takes to make and watch the wait disappear; then documents \
                packed into rows and balanced over ranks by brrr-data.",
        chapter: "data-loading.html",
        crates: &["brrr_data"],
    },
    PageInfo {
        id: PageId::TensorParallel,
        path: "/tensor-parallel",
        title: "Tensor parallelism",
        blurb: "A transformer block split over t ranks as Megatron-LM does it: which rows and \
                columns of each matrix a rank holds, its heads and vocabulary slice, the \
                activations it keeps, and the all-reduces (or, with sequence parallelism, the \
                reduce-scatters and all-gathers) it sends per block.",
        chapter: "tensor-parallel.html",
        crates: &["brrr_perf"],
    },
    PageInfo {
        id: PageId::Pipeline,
        path: "/pipeline",
        title: "Pipeline schedules",
        blurb: "Stages, micro-batches, chunks and a schedule (GPipe, 1F1B, interleaved, \
                zero-bubble ZB-H1 and ZB-H2): the timeline of every stage, the bubble beside \
                its closed form, and the activations each stage holds.",
        chapter: "pipeline-parallel.html",
        crates: &["brrr_pp"],
    },
    PageInfo {
        id: PageId::DataParallel,
        path: "/data-parallel",
        title: "Data parallelism",
        blurb: "A model, a bucket size, ranks and link speed: the backward and each bucket's \
                ring all-reduce on a timeline, the communication left exposed, and what one \
                rank holds and sends under ZeRO stages 0 to 3.",
        chapter: "data-parallel.html",
        crates: &["brrr_dp", "brrr_perf"],
    },
    PageInfo {
        id: PageId::Profile,
        path: "/profile",
        title: "Where the time goes",
        blurb: "A few training steps profiled in this tab, or a trace from `brrr train \
                --profile --trace`: every backend op and every layer's forward and backward \
                on a timeline, and brrr-profile's tables of time, share and achieved \
                GFLOP/s and GB/s per op kind and per layer.",
        chapter: "regimes.html",
        crates: &["brrr_profile", "brrr_train", "brrr_cpu"],
    },
    PageInfo {
        id: PageId::Serving,
        path: "/serving",
        title: "Serving",
        blurb: "Requests arriving, a KV cache of blocks, a token budget per step: brrr-serve's \
                scheduler batches them continuously, cuts long prompts into chunks, preempts \
                when the cache is full and reuses a shared prompt prefix; every step's tokens \
                and blocks on a timeline, beside the same requests served one at a time. \
                Below, speculative decoding's acceptance rule: tokens per forward and \
                speed-up against k; and weights in int8, int4 and fp8: bytes against error.",
        chapter: "serving.html",
        crates: &["brrr_serve"],
    },
];

/// Where the book is served, beside the app.
pub const BOOK_ROOT: &str = "book/";
/// Where `cargo doc` output is served, beside the app (`scripts/serve.sh`).
pub const DOC_ROOT: &str = "doc/";

/// The row of [`PAGES`] for `id`.
pub fn page(id: PageId) -> &'static PageInfo {
    // Every PageId has exactly one row (tested below), so the search always succeeds;
    // the fallback keeps this total without a panic path.
    PAGES.iter().find(|p| p.id == id).unwrap_or(&PAGES[0])
}

/// The book link of a page: `book/CHAPTER`.
pub fn chapter_url(info: &PageInfo) -> String {
    format!("{BOOK_ROOT}{}", info.chapter)
}

/// The docs link of a crate: `doc/CRATE/index.html`.
pub fn crate_doc_url(krate: &str) -> String {
    format!("{DOC_ROOT}{krate}/index.html")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_page_has_one_row_and_a_unique_path() {
        for id in [
            PageId::Roofline,
            PageId::Memory,
            PageId::Plan,
            PageId::Kernels,
            PageId::Train,
            PageId::Puzzles,
            PageId::Checkpointing,
            PageId::Collectives,
            PageId::MixedPrecision,
            PageId::DataLoading,
            PageId::TensorParallel,
            PageId::Pipeline,
            PageId::DataParallel,
            PageId::Profile,
            PageId::Serving,
        ] {
            assert_eq!(PAGES.iter().filter(|p| p.id == id).count(), 1, "{id:?}");
            assert_eq!(page(id).id, id);
        }
        let mut paths: Vec<_> = PAGES.iter().map(|p| p.path).collect();
        paths.sort_unstable();
        paths.dedup();
        assert_eq!(paths.len(), PAGES.len());
        assert!(
            PAGES
                .iter()
                .all(|p| p.path.starts_with('/') && !p.crates.is_empty())
        );
    }

    #[test]
    fn links_are_relative_to_the_app() {
        assert_eq!(chapter_url(page(PageId::Memory)), "book/memory.html");
        assert_eq!(crate_doc_url("brrr_perf"), "doc/brrr_perf/index.html");
    }
}
