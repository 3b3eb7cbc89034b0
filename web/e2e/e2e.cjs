// End-to-end test of the built app in headless Chromium (puppeteer-core, the system
// browser; scripts/test-web.sh installs puppeteer-core and serves the app).
//
//   node web/e2e/e2e.cjs URL SCREENSHOT_DIR [--full]
//
// Opens every page, operates a control, checks that a shown number became the value
// computed here independently (from the formula, not from the app), saves a screenshot
// per page, and fails on any console error or page exception. Prints one JSON line of
// measurements (time to interactive, training tokens/s) prefixed with "METRICS ".
'use strict';
const puppeteer = require('puppeteer-core');
const fs = require('fs');
const path = require('path');

const [url, shots] = process.argv.slice(2);
const full = process.argv.includes('--full');
const CHROME = process.env.CHROME || '/usr/bin/chromium';
const FLAGS = [
  '--no-sandbox', '--disable-gpu-sandbox', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic',
  '--disable-dev-shm-usage', '--enable-unsafe-webgpu',
];

// The demo pages, read from the site map every page list is built from
// (web/src/logic/site.rs PAGES), so that a new page needs no edit here.
const PAGE_PATHS = [...fs.readFileSync(path.join(__dirname, '..', 'src', 'logic', 'site.rs'), 'utf8')
  .matchAll(/^\s*path: "\/([a-z0-9-]+)",$/gm)].map((m) => m[1]);

const errors = [];
const metrics = {};
let failures = 0;

function check(cond, what) {
  if (cond) {
    console.log(`  ok   ${what}`);
  } else {
    console.log(`  FAIL ${what}`);
    failures += 1;
  }
}

function close(a, b, rel = 1e-9) {
  return Math.abs(a - b) <= rel * Math.max(Math.abs(a), Math.abs(b));
}

async function value(page, id) {
  return page.$eval(`[data-testid="${id}"]`, (el) => parseFloat(el.getAttribute('data-value')));
}

async function text(page, id) {
  return page.$eval(`[data-testid="${id}"]`, (el) => el.textContent);
}

// Types an exact value into a size control's number box and commits it (change event).
async function setSize(page, id, v) {
  await page.$eval(`[data-testid="${id}"] input[type=number]`, (el, v) => {
    el.value = v;
    el.dispatchEvent(new Event('change', { bubbles: true }));
  }, String(v));
}

async function waitValue(page, id, pred, timeout = 10000) {
  const t0 = Date.now();
  for (;;) {
    const v = await value(page, id).catch(() => NaN);
    if (pred(v)) return v;
    if (Date.now() - t0 > timeout) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
}

// `query` goes before the route's hash: `?wasm=scalar` loads the build without wasm SIMD.
async function open(browser, route, query = '') {
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(`${route}: console error: ${m.text()}`);
  });
  page.on('pageerror', (e) => errors.push(`${route}: page error: ${e.message}`));
  page.on('requestfailed', (r) => errors.push(`${route}: request failed: ${r.url()} ${r.failure()?.errorText}`));
  await page.goto(`${url}${query}#${route}`, { waitUntil: 'load' });
  return page;
}

async function shot(page, name) {
  await page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: true });
}

async function landing(browser) {
  console.log('landing');
  const t0 = Date.now();
  const page = await open(browser, '/');
  await page.waitForSelector('[data-testid="card-roofline"]', { timeout: 60000 });
  metrics.time_to_interactive_ms = Date.now() - t0;
  const cards = await page.$$eval('.card', (els) => els.length);
  check(PAGE_PATHS.length >= 6 && PAGE_PATHS.includes('collectives'), `site.rs lists the pages (${PAGE_PATHS.join(' ')})`);
  check(cards === PAGE_PATHS.length, `${PAGE_PATHS.length} demo cards, one per PAGES row (got ${cards})`);
  const hrefs = await page.$$eval('.card a', (els) => els.map((a) => a.getAttribute('href')));
  for (const p of PAGE_PATHS) {
    check(hrefs.includes(`#/${p}`), `a link to #/${p}`);
  }
  check(hrefs.some((h) => h && h.startsWith('book/')), 'links into the book');
  // Navigate by clicking, as a reader does.
  await page.click('[data-testid="card-memory"] a.button');
  await page.waitForSelector('[data-testid="total"]', { timeout: 10000 });
  check(page.url().endsWith('#/memory'), 'the card opens the memory calculator');
  await page.goto(`${url}#/`);
  await page.waitForSelector('[data-testid="card-roofline"]');
  await shot(page, 'landing');
  await page.close();
}

async function roofline(browser) {
  console.log('roofline');
  const page = await open(browser, '/roofline');
  await page.waitForSelector('[data-testid="flops"]');
  const [M, K] = [8192, 768];
  let N = 50257;
  check(close(await value(page, 'flops'), 2 * M * N * K), 'GEMM FLOPs = 2MNK');
  check((await text(page, 'regime')).startsWith('compute-bound'), 'the GPT-2 head is compute-bound on an A100');
  const eff0 = await value(page, 'tile-eff');
  check(close(eff0, (M * N) / (Math.ceil(M / 128) * Math.ceil(N / 128) * 128 * 128)), 'tile efficiency of N = 50257');
  N = 50304;
  await setSize(page, 'dim-n', N);
  const flops = await waitValue(page, 'flops', (v) => close(v, 2 * M * N * K));
  check(close(flops, 2 * M * N * K), `N → 50304: FLOPs = ${flops}`);
  check(close(await value(page, 'tile-eff'), 1), 'N = 50304 fills every 128-wide tile');
  // A100 80GB SXM datasheet: 312 TFLOP/s bf16 dense, 2039 GB/s.
  const bytes = (M * K + K * N + M * N) * 2;
  const want = Math.max((2 * M * N * K) / 312e12, bytes / 2039e9);
  check(close(await value(page, 'time'), want), `predicted time = max(F/312T, B/2039G) = ${want}`);
  check((await text(page, 'align-n')).includes('✓'), 'N = 50304 is 16-byte aligned');
  // Switch the op: softmax over 8192 × 50304, 5 FLOPs and 2 × 2 bytes per element.
  await page.select('[data-testid="op"]', 'softmax');
  const sm = await waitValue(page, 'flops', (v) => close(v, 5 * 8192 * 50304));
  check(close(sm, 5 * 8192 * 50304), 'softmax FLOPs = 5 · rows · cols');
  check(close(await value(page, 'bytes'), 2 * 2 * 8192 * 50304), 'softmax bytes = 2 · rows · cols · 2');
  check((await text(page, 'regime')).startsWith('memory-bound'), 'softmax is memory-bound');
  await page.select('[data-testid="op"]', 'gemm');
  await page.waitForSelector('[data-testid="tiles"]');
  await shot(page, 'roofline');
  await page.close();
}

async function memory(browser) {
  console.log('memory');
  const page = await open(browser, '/memory');
  await page.waitForSelector('[data-testid="total"]');
  // GPT-2 XL: l = 48, h = 1600, s = 1024, V = 50257; P = l(12h² + 13h) + Vh + sh + 2h.
  const [l, h, s, V] = [48, 1600, 1024, 50257];
  const P = l * (12 * h * h + 13 * h) + V * h + s * h + 2 * h;
  check(close(await value(page, 'params'), P), `parameters = ${P}`);
  check(close(await value(page, 'memory-bar-weights'), 2 * P), 'bf16 weights = 2P bytes');
  check(close(await value(page, 'memory-bar-optimizer-states'), 8 * P), 'Adam moments = 8P bytes');
  await page.select('[data-testid="zero"]', '3');
  await setSize(page, 'dp', 8);
  const w = await waitValue(page, 'memory-bar-weights', (v) => close(v, (2 * P) / 8));
  check(close(w, (2 * P) / 8), 'ZeRO-3 over 8 ranks: weights = 2P/8');
  check(close(await value(page, 'memory-bar-optimizer-states'), P), 'ZeRO-3 over 8 ranks: moments = 8P/8');
  check(close(await value(page, 'gpus'), 8), '8 GPUs');
  // LoRA rank 8 trains r·(h+3h + h+h + h+4h + 4h+h) = 16·r·h parameters per layer.
  await page.select('[data-testid="lora"]', '8');
  const trained = await waitValue(page, 'trained', (v) => close(v, l * 16 * 8 * h));
  check(close(trained, l * 16 * 8 * h), `LoRA rank 8 trains ${l * 16 * 8 * h} parameters`);
  check(close(await value(page, 'memory-bar-optimizer-states'), (8 * l * 16 * 8 * h) / 8), 'LoRA: moments of the adapters only, ZeRO-3 sharded');
  // Offload: the masters and moments leave the GPU for the host.
  await page.click('[data-testid="offload"]');
  const host = await waitValue(page, 'offloaded', (v) => close(v, (12 * l * 16 * 8 * h) / 8));
  check(close(host, (12 * l * 16 * 8 * h) / 8), 'offload: 12 bytes per trained parameter in host memory');
  check(close(await value(page, 'memory-bar-optimizer-states'), 0), 'offload: no moments on the GPU');
  await shot(page, 'memory');
  await page.close();
}

async function planPage(browser) {
  console.log('plan');
  const page = await open(browser, '/plan');
  await page.waitForSelector('[data-testid="plan-table"]');
  const fit = await value(page, 'fit');
  check(fit > 10 && fit <= (await value(page, 'considered')), `${fit} layouts fit of those tried`);
  const rows = await page.$$eval('[data-testid="plan-table"] tbody tr', (els) => els.length);
  check(rows === 10, `the ten best layouts listed (got ${rows})`);
  // One GPU cannot hold a 175B model's states: nothing fits, and the page says why.
  await page.select('[data-testid="preset"]', 'gpt3-175b');
  await setSize(page, 'gpus', 1);
  await page.waitForFunction(() => document.body.textContent.includes('No layout fits'), { timeout: 10000 });
  check(true, 'gpt3-175b on one GPU: no layout fits, and the page says so');
  await setSize(page, 'gpus', 64);
  await page.waitForSelector('[data-testid="plan-table"]');
  await shot(page, 'plan');
  await page.close();
}

async function kernels(browser) {
  console.log('kernels');
  const page = await open(browser, '/kernels');
  await page.waitForSelector('[data-testid="banner-gpu"], [data-testid="banner-cpu"]', { timeout: 60000 });
  const gpu = (await page.$('[data-testid="banner-gpu"]')) !== null;
  metrics.kernels_device = gpu ? 'webgpu' : 'cpu';
  check(gpu, 'WebGPU adapter found (SwiftShader with --enable-unsafe-webgpu)');
  if (!full) await page.click('[data-testid="quick"]');
  await page.click('[data-testid="run"]');
  await page.waitForFunction(() => {
    const s = document.querySelector('[data-testid="status"]');
    return s && (s.textContent === 'done' || s.textContent === 'stopped');
  }, { timeout: full ? 480000 : 240000 });
  check((await text(page, 'status')) === 'done', 'the kernel run finished');
  const rows = await page.$$eval('[data-testid="gemm-row"]', (els) => els.map((r) => ({
    n: parseFloat(r.getAttribute('data-n')),
    kernel: r.getAttribute('data-kernel'),
    flops: parseFloat(r.querySelector('[data-testid="gemm-flops"]').getAttribute('data-value')),
    rate: parseFloat(r.querySelector('[data-testid="gemm-rate"]').getAttribute('data-value')),
  })));
  check(rows.length >= (gpu ? 12 : 3), `${rows.length} GEMM measurements`);
  check(rows.every((r) => close(r.flops, 2 * r.n ** 3)), 'every GEMM row shows 2n³ FLOPs');
  check(rows.every((r) => r.rate > 0 && Number.isFinite(r.rate)), 'every GEMM rate is positive');
  metrics.gemm = rows.map((r) => `${r.kernel}@${r.n}=${(r.rate / 1e9).toFixed(2)}GFLOP/s`);
  const bytes = await page.$$eval('[data-testid="row-kernel"]', (els) => els.map((r) => ({
    kernel: r.getAttribute('data-kernel'),
    n: parseFloat(r.getAttribute('data-n')),
    bytes: parseFloat(r.querySelector('[data-testid="row-bytes"]').getAttribute('data-value')),
  })));
  const affine = bytes.filter((b) => b.kernel.startsWith('elementwise'));
  check(affine.length > 0 && affine.every((b) => close(b.bytes, 8 * b.n)), 'element-wise f32 moves 8 bytes per element');
  check(close(await value(page, 'fusion-bytes'), 76 / 8), 'unfused GELU moves 9.5× the bytes');
  check((await value(page, 'fusion-diff')) < 1e-4, 'fused and unfused GELU agree');
  metrics.fusion_speedup = await value(page, 'fusion-speedup');
  // Attention, fused against composite (always on brrr-cpu in wasm): one row per T, the
  // composite keeping q, k, v (3·H·T·D f32) and the H·T·T probabilities, the fused path
  // qkv, y and the log-sum-exp (B = 1, H = 4, D = 32, from logic::attention).
  const attn = await page.$$eval('[data-testid="attn-row"]', (els) => els.map((r) => {
    const v = (id) => parseFloat(r.querySelector(`[data-testid="${id}"]`).getAttribute('data-value'));
    return {
      t: parseFloat(r.getAttribute('data-t')), composite: v('attn-composite-s'), fused: v('attn-fused-s'),
      cbytes: v('attn-composite-bytes'), fbytes: v('attn-fused-bytes'), diff: v('attn-diff'),
    };
  }));
  const [H, D] = [4, 32];
  check(attn.length >= 2, `${attn.length} attention rows`);
  check(attn.every((a) => a.cbytes === 4 * (3 * H * a.t * D + H * a.t * a.t)), 'composite attention keeps q, k, v and H·T·T f32 probabilities');
  check(attn.every((a) => a.fbytes === 4 * (4 * a.t * H * D + a.t * H)), 'fused attention keeps qkv, y and T·H f32 log-sum-exp');
  check(attn.every((a) => a.diff < 1e-4), `fused and composite attention agree (max ${Math.max(...attn.map((a) => a.diff))})`);
  check(attn.every((a) => a.composite > 0 && a.fused > 0), 'both attention paths timed');
  metrics.attention = attn.map((a) => `T=${a.t}:${(a.composite * 1e3).toFixed(2)}ms/${(a.fused * 1e3).toFixed(2)}ms`);
  await shot(page, 'kernels');
  await page.close();
}

async function trainOn(browser, device, preset, steps, query = '') {
  const page = await open(browser, '/train', query);
  await page.waitForSelector('[data-testid="banner-gpu"], [data-testid="banner-cpu"]', { timeout: 60000 });
  await page.select('[data-testid="train-device"]', device);
  await page.select('[data-testid="train-preset"]', preset);
  await setSize(page, 'train-steps', steps);
  await page.click('[data-testid="train-start"]');
  await page.waitForFunction((n) => {
    const el = document.querySelector('[data-testid="train-step"]');
    return el && parseFloat(el.getAttribute('data-value')) >= n;
  }, { timeout: 600000 }, steps);
  // The run ends by itself; the button turns back into "Train".
  await page.waitForFunction(() => document.querySelector('[data-testid="train-start"]').textContent === 'Train', { timeout: 60000 });
  return page;
}

async function train(browser) {
  console.log('train');
  // WebGPU on SwiftShader (a CPU emulating a GPU) is slow: the micro model (4 × 32 tokens
  // a step) for a few steps; the CPU in wasm trains the tiny one (8 × 64).
  const gpuSteps = full ? 12 : 4;
  const page = await trainOn(browser, 'auto', 'micro', gpuSteps);
  const gpu = (await page.$('[data-testid="banner-gpu"]')) !== null;
  check(gpu, 'training runs on WebGPU');
  check(close(await value(page, 'tokens-trained'), gpuSteps * 4 * 32), `tokens trained = ${gpuSteps} · 4 · 32`);
  const loss = await value(page, 'train-loss');
  check(loss < Math.log(256) + 0.1 && loss > 0, `loss is finite, near or below ln 256 (${loss})`);
  metrics.train_tokens_per_s_webgpu = await value(page, 'tokens-per-s');
  check(metrics.train_tokens_per_s_webgpu > 0, `tokens/s on WebGPU = ${metrics.train_tokens_per_s_webgpu}`);
  await page.click('[data-testid="sample"]');
  await page.waitForFunction(() => {
    const t = document.querySelector('[data-testid="sample-text"]').textContent;
    return t.startsWith('My fellow Americans') && t.length >= 'My fellow Americans'.length + 150;
  }, { timeout: 120000 });
  check(true, 'the sample continues the prompt');
  await shot(page, 'train');
  await page.close();

  const steps = full ? 100 : 40;
  const cpu = await trainOn(browser, 'cpu', 'tiny', steps);
  check(close(await value(cpu, 'tokens-trained'), steps * 8 * 64), `tokens trained = ${steps} · 8 · 64`);
  const cpuLoss = await value(cpu, 'train-loss');
  check(cpuLoss < Math.log(256) - 1, `the loss fell by more than 1 nat from ln 256 (${cpuLoss})`);
  check((await cpu.$('[data-testid="banner-cpu"]')) !== null, 'the CPU run shows the fallback banner');
  metrics.train_tokens_per_s_cpu = await value(cpu, 'tokens-per-s');
  check(metrics.train_tokens_per_s_cpu > 0, `tokens/s on the CPU in wasm = ${metrics.train_tokens_per_s_cpu}`);
  check(await cpu.evaluate(() => window.brrrWasm) === 'simd128', 'Chromium loads the wasm SIMD build');
  check((await text(cpu, 'banner-cpu')).includes('with wasm SIMD'), 'the banner says the CPU kernels use wasm SIMD');
  await shot(cpu, 'train-cpu');
  await cpu.close();

  // The same run on the build without SIMD, what a browser lacking it loads.
  const scalar = await trainOn(browser, 'cpu', 'tiny', steps, '?wasm=scalar');
  check(await scalar.evaluate(() => window.brrrWasm) === 'scalar', '?wasm=scalar loads the scalar build');
  check((await text(scalar, 'banner-cpu')).includes('without SIMD'), 'the scalar build says so in its banner');
  check(close(await value(scalar, 'tokens-trained'), steps * 8 * 64), `scalar build: tokens trained = ${steps} · 8 · 64`);
  const scalarLoss = await value(scalar, 'train-loss');
  check(scalarLoss < Math.log(256) - 1, `scalar build: the loss fell by more than 1 nat (${scalarLoss})`);
  metrics.train_tokens_per_s_cpu_scalar = await value(scalar, 'tokens-per-s');
  metrics.wasm_simd_speedup = metrics.train_tokens_per_s_cpu / metrics.train_tokens_per_s_cpu_scalar;
  check(metrics.train_tokens_per_s_cpu_scalar > 0,
    `tokens/s on the CPU in wasm without SIMD = ${metrics.train_tokens_per_s_cpu_scalar} (SIMD: ${metrics.wasm_simd_speedup.toFixed(2)}x)`);
  await shot(scalar, 'train-cpu-scalar');
  await scalar.close();
}

// Runs the puzzle in the editor and waits for a verdict or an error to replace "Running…".
async function runPuzzle(page) {
  await page.click('[data-testid="puzzle-run"]');
  await page.waitForSelector('[data-testid="puzzle-verdict"], [data-testid="puzzle-compile-error"], [data-testid="puzzle-gpu-error"]', { timeout: 60000 });
}

async function puzzles(browser) {
  console.log('puzzles');
  const page = await open(browser, '/puzzles');
  await page.waitForSelector('[data-testid="banner-gpu"], [data-testid="banner-cpu"]', { timeout: 60000 });
  check((await page.$('[data-testid="banner-gpu"]')) !== null, 'the puzzles page found WebGPU');
  const options = await page.$$eval('[data-testid="puzzle"] option', (els) => els.length);
  check(options === 17, `17 puzzles to pick from (got ${options})`);
  const tip = await page.$eval('[data-testid="puzzle-tip"]', (el) => el.textContent).catch(() => '');
  check(tip.includes('A tip') && tip.includes('local.x'), `puzzle 1 has a tip behind a disclosure (${tip.slice(0, 60)})`);
  const chapter = await page.$eval('[data-testid="chapter-link"]', (a) => a.getAttribute('href'));
  check(chapter === 'book/puzzles.html', `links the book chapter (${chapter})`);
  // Puzzle 1's stub writes nothing: every element of out stays 0 and differs from a + 10.
  const stub = await page.$eval('[data-testid="puzzle-source"]', (el) => el.value);
  check(stub.includes('your code: begin') && !stub.includes('a[i] + 10.0'), 'the editor holds puzzle 1\'s stub');
  await runPuzzle(page);
  check(await page.$eval('[data-testid="puzzle-verdict"]', (el) => el.dataset.pass === 'false' && el.textContent.startsWith('FAIL')), 'the stub FAILs');
  const bad = await page.$$eval('[data-testid="array-out"] .cell.bad', (els) => els.length);
  check(bad === 4, `all 4 output cells are marked wrong (got ${bad})`);
  const rows = await page.$$eval('[data-testid="puzzle-arrays"] .array-row', (els) => els.length);
  check(rows === 3, `input a, out and expected are drawn (${rows} rows)`);
  await shot(page, 'puzzles-stub');
  // The solution passes, and out = a + 10 cell by cell as read from the page.
  await page.click('[data-testid="puzzle-solution"]');
  await page.waitForFunction(() => document.querySelector('[data-testid="puzzle-source"]').value.includes('a[i] + 10.0'));
  await runPuzzle(page);
  check(await page.$eval('[data-testid="puzzle-verdict"]', (el) => el.dataset.pass === 'true' && el.textContent.startsWith('PASS')), 'the solution PASSes');
  const cellsOf = (id) => page.$$eval(`[data-testid="${id}"] .cell`, (els) => els.map((e) => parseFloat(e.textContent)));
  const [a, out] = [await cellsOf('array-a'), await cellsOf('array-out')];
  check(a.length === 4 && out.every((v, i) => v === a[i] + 10), `out = a + 10 (${a} → ${out})`);
  const counts = () => page.$eval('[data-testid="puzzle-counts"]', (el) => [el.dataset.reads, el.dataset.writes, el.querySelectorAll('.cell').length].join(' ')).catch(() => 'none');
  const mapCounts = await counts();
  check(mapCounts === '4 4 4', `map: 4 invocations, each 1 global read and 1 write (reads writes cells: ${mapCounts})`);
  await shot(page, 'puzzles-pass');
  // A syntax error: shown inline, the page stays usable, no uncaught error (checked at the end).
  await page.$eval('[data-testid="puzzle-source"]', (el) => {
    el.value = el.value.replace('out[i] = a[i] + 10.0;', 'out[i] = a[i] + ;');
    el.dispatchEvent(new Event('input', { bubbles: true }));
  });
  await runPuzzle(page);
  const msg = await page.$eval('[data-testid="puzzle-compile-error"]', (el) => el.textContent).catch(() => '');
  check(/line \d+:\d+/.test(msg), `the compile error is shown inline with its line (${msg.replace(/\s+/g, ' ').slice(0, 120)})`);
  await shot(page, 'puzzles-compile-error');
  await page.click('[data-testid="puzzle-solution"]');
  await runPuzzle(page);
  check(await page.$eval('[data-testid="puzzle-verdict"]', (el) => el.dataset.pass === 'true').catch(() => false), 'after the error the page still runs kernels');
  // Puzzle 3 without its guard: 8 invocations for 4 elements write past the end of out,
  // which the slack catches although out[0..4] is right.
  await page.select('[data-testid="puzzle"]', '2');
  await page.waitForFunction(() => document.querySelector('[data-testid="puzzle-source"]').value.includes('Puzzle 3'));
  await page.$eval('[data-testid="puzzle-source"]', (el) => {
    el.value = el.value.replace('// ---- your code: begin ----', '// ---- your code: begin ----\n    out[i] = a[i] + 10.0;');
    el.dispatchEvent(new Event('input', { bubbles: true }));
  });
  await runPuzzle(page);
  const guard = await page.$eval('[data-testid="puzzle-verdict"]', (el) => el.textContent).catch(() => '');
  check(guard.startsWith('FAIL') && guard.includes('past the end'), `a missing guard is caught (${guard.slice(0, 100)})`);
  check((await page.$$('[data-testid="array-past-the-end"] .cell.bad')).length > 0, 'the writes past the end are drawn');
  const guardCounts = await counts();
  check(guardCounts === '8 8 8', `without the guard all 8 invocations read and write (reads writes cells: ${guardCounts})`);
  await shot(page, 'puzzles-guard');
  // Puzzle 14's solution: 5×5 matrices drawn as grids of 5 columns.
  await page.select('[data-testid="puzzle"]', '13');
  await page.click('[data-testid="puzzle-solution"]');
  await page.waitForFunction(() => document.querySelector('[data-testid="puzzle-source"]').value.includes('var acc'));
  await runPuzzle(page);
  check(await page.$eval('[data-testid="puzzle-verdict"]', (el) => el.dataset.pass === 'true').catch(() => false), 'the tiled matmul solution PASSes');
  await shot(page, 'puzzles-matmul');
  // Puzzle 10's solution without the barrier after filling `cache`: the sum may well be
  // right (a workgroup in lockstep), the race checker fails it all the same.
  await page.select('[data-testid="puzzle"]', '9');
  await page.click('[data-testid="puzzle-solution"]');
  await page.waitForFunction(() => document.querySelector('[data-testid="puzzle-source"]').value.includes('cache[i] = a[i] * b[i];'));
  await page.$eval('[data-testid="puzzle-source"]', (el) => {
    el.value = el.value.replace('cache[i] = a[i] * b[i];\n    workgroupBarrier();', 'cache[i] = a[i] * b[i];');
    el.dispatchEvent(new Event('input', { bubbles: true }));
  });
  await runPuzzle(page);
  const race = await page.$eval('[data-testid="puzzle-verdict"]', (el) => el.textContent).catch(() => '');
  check(race.startsWith('FAIL') && race.includes('shared-memory race on cache['), `a missing barrier is caught as a race (${race.slice(0, 120)})`);
  await shot(page, 'puzzles-race');
  await page.close();
}

async function checkpointing(browser) {
  console.log('checkpointing');
  const page = await open(browser, '/checkpointing');
  await page.waitForSelector('[data-testid="ckpt-peak"]', { timeout: 60000 });
  const chapter = await page.$eval('[data-testid="chapter-link"]', (a) => a.getAttribute('href'));
  check(chapter === 'book/checkpointing.html', `links the book chapter (${chapter})`);
  // GPT-2 small in f32, B = 8, T = 1024: every input and stash of GptShape::chain's count
  // (block beyond its input 15·N·C + 4·N + B·H·T²; head N·C + 2·N + N·V, targets 4N bytes).
  const [L, C, H, T, B, V, e] = [12, 768, 12, 1024, 8, 50257, 4];
  const N = B * T;
  const acts = L * (N * C + 15 * N * C + 4 * N + B * H * T * T) * e + (N * C + N * C + 2 * N + N * V) * e + 4 * N;
  check(close(await value(page, 'ckpt-activations'), acts), `all activations = ${acts} bytes`);
  const boxes = () => page.$$eval('[data-testid="ckpt-seg"]', (els) => els.map((el) => el.dataset.kept));
  check((await boxes()).length === L + 1, 'one box per block and one for the head');
  const schedule = () => page.$eval('[data-testid="ckpt-schedule"]', (el) => el.textContent);
  const [lo, hi] = [await value(page, 'ckpt-min-budget'), await value(page, 'ckpt-none-peak')];
  check(lo < hi, `smallest feasible budget ${lo} < peak without recomputation ${hi}`);
  const mid = await value(page, 'ckpt-peak');
  check(mid > lo && mid < hi && (await value(page, 'ckpt-extra')) > 0, `the default budget recomputes (peak ${mid})`);
  check(await page.$('[data-testid="ckpt-chart"] svg path') !== null, 'the memory curve is drawn');
  await shot(page, 'checkpointing');
  // Moving the budget to its smallest value changes the schedule and costs more compute.
  const midSchedule = await schedule();
  const midExtra = await value(page, 'ckpt-extra');
  await setSize(page, 'ckpt-budget', lo);
  const tight = await waitValue(page, 'ckpt-peak', (v) => v <= lo);
  check(tight <= lo, `at the smallest budget the peak ${tight} fits in ${lo}`);
  check((await schedule()) !== midSchedule, 'moving the budget changes the schedule');
  check((await value(page, 'ckpt-extra')) > midExtra, 'a smaller budget recomputes more');
  await setSize(page, 'ckpt-budget', hi);
  const loose = await waitValue(page, 'ckpt-extra', (v) => v === 0);
  check(loose === 0, 'at the peak without recomputation nothing is recomputed');
  // none: every stash kept, the peak is the no-recomputation peak, above all activations.
  await page.select('[data-testid="ckpt-strategy"]', 'none');
  await page.waitForFunction(() => !document.querySelector('[data-testid="ckpt-budget"]'));
  const nonePeak = await value(page, 'ckpt-peak');
  check(nonePeak === hi && nonePeak >= acts, `none peaks at ${nonePeak} ≥ the activations`);
  check((await boxes()).every((k) => k === 'all'), 'none keeps every stash');
  // sqrt: 13 segments in groups of round(√13) = 4, inputs of 0, 4, 8 kept.
  await page.select('[data-testid="ckpt-strategy"]', 'sqrt');
  const inputs = await waitValue(page, 'ckpt-kept-inputs', (v) => v === 3);
  check(inputs === 3 && (await boxes()).filter((k) => k === 'input').length === 3, `sqrt keeps 3 inputs of 13 segments (${inputs})`);
  check((await value(page, 'ckpt-peak')) < hi, 'sqrt peaks lower than none');
  await shot(page, 'checkpointing-sqrt');
  await page.close();
}

// Every rank's row of cells, as numbers, and whether the page marks it as the reference.
async function collRows(page) {
  return page.$$eval('[data-testid^="coll-rank-"]', (rows) => rows.map((r) => ({
    ok: r.dataset.ok === 'true',
    cells: [...r.querySelectorAll('.cell')].map((c) => parseFloat(c.textContent)),
  })));
}

async function collSteps(page, want) {
  return waitValue(page, 'coll-steps', (v) => v === want);
}

async function collectives(browser) {
  console.log('collectives');
  const page = await open(browser, '/collectives');
  await page.waitForSelector('[data-testid="coll-steps"]', { timeout: 60000 });
  const chapter = await page.$eval('[data-testid="chapter-link"]', (el) => el.getAttribute('href'));
  check(chapter === 'book/collectives.html', `links the book chapter (${chapter})`);
  // Ring all-reduce: n − 1 reduce-scatter steps and n − 1 all-gather steps.
  for (const n of [4, 6]) {
    await setSize(page, 'coll-ranks', n);
    const steps = await collSteps(page, 2 * (n - 1));
    check(steps === 2 * (n - 1), `ring on ${n} ranks takes 2(n−1) = ${2 * (n - 1)} steps (got ${steps})`);
    const alpha = await value(page, 'coll-model-steps');
    check(alpha === 2 * (n - 1), `brrr-perf's ring model has ${2 * (n - 1)} α terms (got ${alpha})`);
    const modelBytes = await value(page, 'coll-model-bytes');
    const want = 2 * (n - 1) / n * 8 * 4;
    check(close(modelBytes, want, 1e-6), `ring model bytes/rank = 2(n−1)/n·S = ${want} (got ${modelBytes})`);
  }
  // Step 0: own values only, no rank done.
  let rows = await collRows(page);
  check(rows.length === 6 && rows.every((r, i) => r.cells.length === 8 && r.cells.every((x) => x === i + 1)), 'step 0: rank r holds r + 1 in each of 8 cells');
  check(rows.every((r) => !r.ok), 'step 0: no rank holds the sum yet');
  await page.click('[data-testid="coll-next"]');
  await waitValue(page, 'coll-step', (v) => v === 1);
  const moves = await page.$$eval('[data-testid="coll-moves"] li', (els) => els.map((e) => e.textContent));
  check(moves.length === 6 && moves.every((m, i) => m.startsWith(`rank ${i} → rank ${(i + 1) % 6}, chunk`)), `step 1: each rank sends one chunk to the next (${moves[0]})`);
  check((await page.$$('.cell.recv')).length > 0 && (await page.$$('.cell.send')).length > 0, 'the moved cells are highlighted');
  // Play advances on its own.
  await page.click('[data-testid="coll-play"]');
  const played = await waitValue(page, 'coll-step', (v) => v >= 3, 8000);
  check(played >= 3, `Play steps forward (at step ${played})`);
  await page.click('[data-testid="coll-play"]');
  for (const alg of ['ring', 'tree', 'double-tree', 'rhd', 'naive']) {
    await page.select('[data-testid="coll-algorithm"]', alg);
    await waitValue(page, 'coll-step', (v) => v === 0);
    await page.click('[data-testid="coll-last"]');
    await page.waitForSelector('[data-testid="coll-verdict"]', { timeout: 10000 });
    const pass = await page.$eval('[data-testid="coll-verdict"]', (el) => el.dataset.pass === 'true');
    rows = await collRows(page);
    const sum = 6 * 7 / 2;
    check(pass && rows.length === 6 && rows.every((r) => r.ok && r.cells.every((x) => x === sum)),
      `${alg}: at the end every rank holds the reference sum ${sum}`);
  }
  await shot(page, 'collectives-end');
  // The screenshot mid-way: ring, 4 ranks, the third reduce-scatter step.
  await page.select('[data-testid="coll-algorithm"]', 'ring');
  await setSize(page, 'coll-ranks', 4);
  await collSteps(page, 6);
  for (let i = 1; i <= 3; i += 1) {
    await page.click('[data-testid="coll-next"]');
    await waitValue(page, 'coll-step', (v) => v === i);
  }
  await shot(page, 'collectives');
  await page.close();
}

// f32 bits of x, and bf16's (f32 rounded to nearest even at bit 16), from the formats'
// definitions; f16's for a positive normal x: exponent floor(log2 x) + 15, 10 mantissa
// bits rounded to nearest even.
function f32Bits(x) {
  const dv = new DataView(new ArrayBuffer(4));
  dv.setFloat32(0, x);
  return dv.getUint32(0);
}
function bf16Bits(x) {
  const u = f32Bits(x);
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}
function f16BitsNormal(x) {
  const e = Math.floor(Math.log2(x));
  const v = (x / 2 ** e) * 1024;
  let r = Math.round(v);
  if (Math.abs(r - v) === 0.5 && r % 2 !== 0) r -= 1;
  return ((e + 15) << 10) + (r - 1024);
}

async function setValue(page, text) {
  await page.$eval('[data-testid="mp-value"]', (el, t) => {
    el.value = t;
    el.dispatchEvent(new InputEvent('input', { bubbles: true }));
  }, text);
}

async function bits(page, name) {
  return page.$eval(`[data-testid="mp-bits-${name}"]`, (el) => parseInt(el.dataset.bits, 16));
}

async function mixedPrecision(browser) {
  console.log('mixed-precision');
  const page = await open(browser, '/mixed-precision');
  await page.waitForSelector('[data-testid="mp-formats"]', { timeout: 60000 });
  const chapter = await page.$eval('[data-testid="chapter-link"]', (a) => a.getAttribute('href'));
  check(chapter === 'book/mixed-precision.html', `links the book chapter (${chapter})`);
  // Ranges: (2 − 2^−m)·2^emax, 2^(emin − m), 2^−m.
  check(await value(page, 'mp-range-f16-max') === 65504, 'f16 max = (2 − 2^−10)·2^15 = 65504');
  check(await value(page, 'mp-range-f16-min-subnormal') === 2 ** -24, 'f16 smallest subnormal = 2^−24');
  check(await value(page, 'mp-range-bf16-max') === (2 - 2 ** -7) * 2 ** 127, 'bf16 max = (2 − 2^−7)·2^127');
  check(await value(page, 'mp-range-f32-epsilon') === 2 ** -23, 'f32 epsilon = 2^−23');
  // 0.1 in each format, bit for bit.
  const x = 0.1;
  check(await bits(page, 'f32') === f32Bits(x), `0.1 in f32 is 0x${f32Bits(x).toString(16)}`);
  check(await bits(page, 'f16') === f16BitsNormal(x), `0.1 in f16 is 0x${f16BitsNormal(x).toString(16)}`);
  check(await bits(page, 'bf16') === bf16Bits(x), `0.1 in bf16 is 0x${bf16Bits(x).toString(16)}`);
  // f16's largest value, the first to overflow, a subnormal and an underflow.
  await setValue(page, '65504');
  await waitValue(page, 'mp-stored-f16', (v) => v === 65504);
  check(await value(page, 'mp-error-f16') === 0, '65504 is exact in f16');
  await setValue(page, '65520');
  const inf = await waitValue(page, 'mp-stored-f16', (v) => v === Infinity);
  check(inf === Infinity && (await text(page, 'mp-fate-f16')).startsWith('overflow'), '65520 overflows f16');
  check(await value(page, 'mp-stored-bf16') === 65536, '65520 rounds to 65536 in bf16');
  await setValue(page, '6e-8');
  const sub = await waitValue(page, 'mp-stored-f16', (v) => v === 2 ** -24);
  check(sub === 2 ** -24 && (await text(page, 'mp-fate-f16')).startsWith('subnormal'), '6e-8 is f16\'s smallest subnormal 2^−24');
  check(close(await value(page, 'mp-error-f16'), Math.abs(2 ** -24 - 6e-8) / 6e-8, 1e-12), 'relative error |2^−24 − 6e−8| / 6e−8');
  await setValue(page, '2e-8');
  await waitValue(page, 'mp-stored-f16', (v) => v === 0);
  check((await text(page, 'mp-fate-f16')).startsWith('underflow'), '2e-8 underflows f16');
  // The slider: log10 |x| = 5 is 100000, past f16's range.
  await page.$eval('[data-testid="mp-slider"]', (el) => {
    el.value = '5';
    el.dispatchEvent(new InputEvent('input', { bubbles: true }));
  });
  await waitValue(page, 'mp-stored-f32', (v) => v === 1e5);
  check((await text(page, 'mp-fate-f16')).startsWith('overflow'), 'the slider at 10^5 overflows f16');
  await setValue(page, '0.1');
  // The fp16 run: starting at 2^24 it overflows, backs off, applies steps, grows again.
  const total = 60;
  const step = await waitValue(page, 'mp-step', (v) => v === total, 180000);
  check(step === total, `the fp16 run trained ${total} steps in the page (at ${step})`);
  const skipped = await value(page, 'mp-skipped');
  const backoffs = await value(page, 'mp-backoffs');
  const scale = await value(page, 'mp-scale');
  check(skipped >= 1 && backoffs >= 1, `overflowing steps were skipped (${skipped}) and the scale backed off (${backoffs})`);
  check(scale < 2 ** 24 && Number.isInteger(Math.log2(scale)), `the scale is a power of two below 2^24 (${scale})`);
  check(Number.isFinite(await value(page, 'mp-loss')), 'the loss is finite');
  check(await page.$('[data-testid="mp-scale-chart"] svg path') !== null, 'the loss scale is drawn');
  await shot(page, 'mixed-precision');
  await page.close();
}

async function dataLoading(browser) {
  console.log('data-loading');
  const page = await open(browser, '/data-loading');
  await page.waitForSelector('[data-testid="dl-total-on"]', { timeout: 60000 });
  const chapter = await page.$eval('[data-testid="chapter-link"]', (a) => a.getAttribute('href'));
  check(chapter === 'book/data-loading.html', `links the book chapter (${chapter})`);
  // 8 steps of 100 ms, a batch in 60 ms: n(P + S) without prefetching; P + nS with it.
  let [P, S, n] = [60, 100, 8];
  check(await value(page, 'dl-total-off') === n * (P + S), `prefetching off: n(P + S) = ${n * (P + S)} ms`);
  check(await value(page, 'dl-total-on') === P + n * S, `prefetching on: P + nS = ${P + n * S} ms (the wait disappears)`);
  check(await value(page, 'dl-steady-wait') === 0, 'no wait per step once the pipeline is full');
  P = 150;
  await setSize(page, 'dl-load', P);
  const on = await waitValue(page, 'dl-total-on', (v) => v === n * P + S);
  check(on === n * P + S, `a slow loader sets the pace: nP + S = ${n * P + S} ms (got ${on})`);
  check(await value(page, 'dl-steady-wait') === P - S, `the step waits P − S = ${P - S} ms`);
  await setSize(page, 'dl-load', 60);
  await waitValue(page, 'dl-total-on', (v) => v === 60 + n * S);
  check(await page.$('[data-testid="dl-timeline-on"] rect.dl.step') !== null, 'the timeline is drawn');
  // Packing and balance from brrr-data.
  const rows = await value(page, 'dl-rows');
  check(rows < await value(page, 'dl-padded-rows'), `packing needs fewer rows (${rows}) than one document per row`);
  check((await page.$$('[data-testid="dl-row"]')).length === Math.min(rows, 40), 'one bar per packed row');
  check(await value(page, 'dl-imbalance-after') < await value(page, 'dl-imbalance-before'), 'balancing lowers the imbalance');
  check((await page.$$('[data-testid="dl-rank"]')).length === 4, 'four ranks drawn');
  await setSize(page, 'dl-world', 8);
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="dl-rank"]').length === 8, { timeout: 10000 });
  check(await value(page, 'dl-imbalance-after') >= 1, 'imbalance ≥ 1 on 8 ranks');
  await setSize(page, 'dl-world', 4);
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="dl-rank"]').length === 4, { timeout: 10000 });
  await shot(page, 'data-loading');
  await page.close();
}

async function tensorParallel(browser) {
  console.log('tensor-parallel');
  const page = await open(browser, '/tensor-parallel');
  await page.waitForSelector('[data-testid="sent-forward"]', { timeout: 60000 });
  const chapter = await page.$eval('[data-testid="chapter-link"]', (el) => el.getAttribute('href'));
  check(chapter === 'book/tensor-parallel.html', `links the book chapter (${chapter})`);
  // brrr train's default model (C = 128) over t ranks, micro-batch B·T = 16·128: two
  // all-reduces of B·T·C elements per block and pass, each sending 2(t−1)/t of them.
  const btc = 16 * 128 * 128;
  for (const t of [2, 4]) {
    await setSize(page, 'tp', t);
    const want = 2 * (2 * (t - 1) / t) * btc;
    const fwd = await waitValue(page, 'sent-forward', (v) => close(v, want, 1e-9));
    check(close(fwd, want, 1e-9), `tp ${t}: 2 all-reduces of B·T·C send ${want} elements per block forward (got ${fwd})`);
    const bwd = await value(page, 'sent-backward');
    check(close(bwd, want, 1e-9), `tp ${t}: and the same backward (got ${bwd})`);
    // A rank holds 1/t of the four matrices (12C² weights) plus replicated LayerNorms
    // and row-parallel biases.
    const mine = await value(page, 'params-rank');
    const c = 128;
    check(mine >= 12 * c * c / t && mine < 12 * c * c / t + 13 * c, `tp ${t}: a rank holds 12C²/t weights plus small replicated ones (got ${mine})`);
  }
  const pieces = await page.$$eval('[data-testid="tp-pieces"] tbody tr', (els) => els.length);
  check(pieces >= 4, `the table lists the block's matrices (${pieces} rows)`);
  await setSize(page, 'tp', 2);
  await shot(page, 'tensor-parallel');
  await page.close();
}

async function profilePage(browser) {
  console.log('profile');
  const page = await open(browser, '/profile');
  await page.waitForSelector('[data-testid="profile-run"]', { timeout: 60000 });
  const chapter = await page.$eval('[data-testid="chapter-link"]', (el) => el.getAttribute('href'));
  check(chapter === 'book/regimes.html', `links the book chapter (${chapter})`);
  // Four steps of the tiny GPT on brrr-cpu in wasm, through the profiled backend.
  await page.click('[data-testid="profile-run"]');
  await page.waitForSelector('[data-testid="profile-ops"]', { timeout: 180000 });
  const kinds = await page.$$eval('[data-testid="profile-ops"] tbody tr td:first-child', (els) => els.map((e) => e.textContent));
  check(kinds.includes('gemm') && kinds.includes('multi_tensor_adamw') && kinds.length >= 10, `the op table has the step's kinds (${kinds.join(' ')})`);
  const layers = await page.$$eval('[data-testid="profile-layers"] tbody tr td:first-child', (els) => els.map((e) => e.textContent));
  check(layers.includes('h.*.attn forward') && layers.includes('h.*.mlp backward'), `the layer table sums the blocks (${layers.slice(0, 6).join(', ')}…)`);
  const ms = await value(page, 'profile-step-ms');
  const inOps = await value(page, 'profile-in-ops');
  check(ms > 0 && inOps > 0.3 && inOps <= 1, `a step of ${ms.toFixed(1)} ms, ${(100 * inOps).toFixed(1)}% of it in ops`);
  const bars = await page.$$eval('[data-testid="profile-timeline"] rect', (els) => els.length);
  check(bars >= 100, `the timeline draws the step's spans (${bars})`);
  await shot(page, 'profile');
  // A trace file (as `brrr train --profile --trace` writes one): two steps, the first
  // left out, whose second holds one layer region and two ops.
  const op = (name, ts, dur, flops, bytes) => ({ ph: 'X', cat: 'op', name, ts, dur, pid: 1, tid: 1, args: { flops, bytes, shape: 's', dtype: 'f32' } });
  const trace = { traceEvents: [
    { ph: 'X', cat: 'cpu', name: 'step', ts: 0, dur: 100, pid: 1, tid: 1 },
    op('gemm', 10, 50, 1e6, 1e4),
    { ph: 'X', cat: 'cpu', name: 'step', ts: 200, dur: 1000, pid: 1, tid: 1 },
    { ph: 'X', cat: 'layer', name: 'h.0 forward', ts: 300, dur: 600, pid: 1, tid: 1 },
    op('gemm', 310, 400, 8e8, 1e6),
    op('gelu', 720, 100, 1e5, 4e5),
  ] };
  const file = path.join(shots, 'profile-trace.json');
  fs.writeFileSync(file, JSON.stringify(trace));
  const input = await page.$('[data-testid="profile-file"]');
  await input.uploadFile(file);
  await page.waitForFunction(() => {
    const rows = document.querySelectorAll('[data-testid="profile-ops"] tbody tr');
    return rows.length === 2;
  }, { timeout: 10000 });
  const fromFile = await value(page, 'profile-step-ms');
  check(close(fromFile, 1.0, 1e-9), `the file's second step: 1 ms (got ${fromFile})`);
  check(close(await value(page, 'profile-in-ops'), 0.5, 1e-9), 'half of it in ops (400 + 100 of 1000 µs)');
  await page.close();
}

async function pipelinePage(browser) {
  console.log('pipeline');
  const page = await open(browser, '/pipeline');
  await page.waitForSelector('[data-testid="pp-bubble"]', { timeout: 60000 });
  const chapter = await page.$eval('[data-testid="chapter-link"]', (el) => el.getAttribute('href'));
  check(chapter === 'book/pipeline-parallel.html', `links the book chapter (${chapter})`);
  // 1F1B with p = 4, m = 8: bubble (p−1)/(m+p−1), stage r holds p − r micro-batches.
  const [p, m] = [4, 8];
  const bubble = await value(page, 'pp-bubble');
  check(close(bubble, (p - 1) / (m + p - 1), 1e-9), `1F1B bubble (p−1)/(m+p−1) = ${((p - 1) / (m + p - 1)).toFixed(4)} (got ${bubble})`);
  const inFlight = [];
  for (let r = 0; r < p; r++) inFlight.push(parseInt(await text(page, `pp-in-flight-${r}`), 10));
  check(inFlight.join(',') === '4,3,2,1', `1F1B: stage r holds p − r micro-batches (got ${inFlight})`);
  await page.select('[data-testid="pp-schedule"]', 'gpipe');
  const g = await waitValue(page, 'pp-bubble', (v) => close(v, (p - 1) / (m + p - 1), 1e-9));
  check(close(g, (p - 1) / (m + p - 1), 1e-9), `GPipe has the same bubble (got ${g})`);
  const g0 = parseInt(await text(page, 'pp-in-flight-0'), 10);
  check(g0 === m, `GPipe: stage 0 holds all m = ${m} micro-batches (got ${g0})`);
  await page.select('[data-testid="pp-schedule"]', 'zb-h1');
  // F = B = W = 1: 1F1B idles (p−1)·3 per stage, ZB-H1 a third of that (Qi et al. 2024).
  const zbIdle = (p - 1) * 3 / 3;
  const zbWant = zbIdle / (3 * m + zbIdle);
  const zb = await waitValue(page, 'pp-bubble', (v) => close(v, zbWant, 1e-6));
  check(close(zb, zbWant, 1e-6), `ZB-H1 idles a third of 1F1B's time: bubble ${zbWant.toFixed(4)} (got ${zb})`);
  await page.select('[data-testid="pp-schedule"]', '1f1b');
  await page.waitForSelector('[data-testid="pp-timeline"] svg', { timeout: 10000 });
  await shot(page, 'pipeline');
  await page.close();
}

async function dataParallel(browser) {
  console.log('data-parallel');
  const page = await open(browser, '/data-parallel');
  await page.waitForSelector('[data-testid="dp-exposed"]', { timeout: 60000 });
  const chapter = await page.$eval('[data-testid="chapter-link"]', (a) => a.getAttribute('href'));
  check(chapter === 'book/data-parallel.html', `links the book chapter (${chapter})`);
  // GPT-2 small: Ψ = L(12C² + 13C) + VC + TC + 2C.
  const [L, C, T, V] = [12, 768, 1024, 50257];
  const psi = L * (12 * C * C + 13 * C) + V * C + T * C + 2 * C;
  check(await value(page, 'dp-params') === psi, `Ψ = L(12C² + 13C) + VC + TC + 2C = ${psi}`);
  // Backward: the tied head costs V/(12C) of a block, then L blocks of 2 ms.
  const layer = 2e-3;
  const backward = layer * V / (12 * C) + L * layer;
  check(close(await value(page, 'dp-backward'), backward, 1e-6), `backward = t(V/(12C) + L) = ${backward}`);
  // Every f32 gradient is all-reduced once on a ring of 8 at 50 GB/s, α = 5 µs:
  // Σ 2(n−1)α + 2(n−1)/n · S/β = buckets · 2(n−1)α + 2(n−1)/n · 4Ψ/β.
  let n = 8;
  const buckets = await value(page, 'dp-buckets');
  const comm = buckets * 2 * (n - 1) * 5e-6 + 2 * (n - 1) / n * 4 * psi / 50e9;
  check(close(await value(page, 'dp-comm'), comm, 1e-6), `all-reduce time = ${comm} s over ${buckets} buckets`);
  const hidden = await value(page, 'dp-hidden');
  check(hidden > 0 && hidden < 1, `part of the communication is hidden (${hidden})`);
  check(await value(page, 'dp-exposed') > 0, 'the last bucket (the embeddings) is exposed');
  check((await page.$$('[data-testid="dp-timeline"] rect')).length === L + 1 + buckets, 'one block per backward part and per bucket');
  // ZeRO (f32 with AdamW, as brrr-dp): 16Ψ, 8Ψ + 8Ψ/n, 4Ψ + 12Ψ/n, 16Ψ/n per rank.
  const mem = [16 * psi, 8 * psi + 8 * psi / n, 4 * psi + 12 * psi / n, 16 * psi / n];
  for (let k = 0; k < 4; k++) {
    check(close(await value(page, `dp-mem-${k}`), mem[k]), `ZeRO ${k}: ${mem[k]} bytes per rank`);
  }
  check(close(await value(page, 'dp-sent-0'), 2 * (n - 1) / n * 4 * psi), 'ZeRO 0 sends 2(n−1)/n · 4Ψ bytes');
  check(close(await value(page, 'dp-sent-3'), 3 * (n - 1) / n * 4 * psi), 'ZeRO 3 sends 3(n−1)/n · 4Ψ bytes');
  // A faster link hides more.
  await setSize(page, 'dp-link', 400);
  const faster = await waitValue(page, 'dp-hidden', (v) => v > hidden);
  check(faster > hidden, `a 400 GB/s link hides more (${faster} > ${hidden})`);
  await setSize(page, 'dp-link', 50);
  await waitValue(page, 'dp-hidden', (v) => close(v, hidden));
  // Four ranks: ZeRO 3 holds 16Ψ/4.
  n = 4;
  await setSize(page, 'dp-ranks', n);
  const m3 = await waitValue(page, 'dp-mem-3', (v) => close(v, 16 * psi / n));
  check(close(m3, 16 * psi / n), `four ranks: ZeRO 3 holds 16Ψ/4 (${m3})`);
  await setSize(page, 'dp-ranks', 8);
  await waitValue(page, 'dp-mem-3', (v) => close(v, 2 * psi));
  await shot(page, 'data-parallel');
  // GPT-3 175B: 1.7e11 parameters overflow wasm32's usize offsets, so the page keeps the
  // memory table and says why there is no timeline (it used to show only an error).
  await page.select('[data-testid="dp-preset"]', 'gpt3-175b');
  const big = await waitValue(page, 'dp-params', (v) => v > 1e11);
  check(big > 1.7e11, `GPT-3 175B: Ψ = ${big}`);
  const why = await page.$eval('[data-testid="banner-info"]', (e) => e.textContent);
  check(why.includes('32-bit usize'), `no timeline, and why (${why.slice(0, 60)}…)`);
  check(close(await value(page, 'dp-mem-3'), 16 * big / 8), 'its ZeRO-3 memory is still shown: 16Ψ/8');
  check((await page.$$('[data-testid="banner-error"]')).length === 0, 'no error banner');
  await page.close();
}

async function serving(browser) {
  console.log('serving');
  const page = await open(browser, '/serving');
  await page.waitForSelector('[data-testid="serve-steps"]', { timeout: 60000 });
  const chapter = await page.$eval('[data-testid="chapter-link"]', (a) => a.getAttribute('href'));
  check(chapter === 'book/serving.html', `links the book chapter (${chapter})`);
  const steps = await value(page, 'serve-steps');
  check(steps > 0, `the default requests take ${steps} steps`);
  // One request alone: its 96-token prompt (within the 128-token budget) in one step that
  // samples the first of its 24 tokens, then one step per further token.
  await setSize(page, 'serve-requests', 1);
  const one = await waitValue(page, 'serve-steps', (v) => v === 24);
  check(one === 24, `one request: 1 prefill step + 23 decodes = 24 steps (got ${one})`);
  const computed = await value(page, 'serve-computed');
  check(computed === 96 + 23, `it computes its prompt and 23 decodes: 119 tokens (got ${computed})`);
  await setSize(page, 'serve-requests', 12);
  await waitValue(page, 'serve-steps', (v) => v === steps);
  await page.waitForSelector('[data-testid="serve-timeline"] svg rect', { timeout: 10000 });
  // Speculative decoding: brrr-serve's acceptance rule in wasm. A draft that is the
  // target keeps every proposal.
  const alpha = await value(page, 'spec-alpha');
  check(alpha > 0.3 && alpha < 1, `a 70% draft keeps some proposals: α = ${alpha}`);
  await setSize(page, 'spec-quality', 100);
  const perfect = await waitValue(page, 'spec-alpha', (v) => v === 1);
  check(perfect === 1, `a perfect draft keeps every proposal (α = ${perfect})`);
  await setSize(page, 'spec-quality', 70);
  await page.waitForSelector('[data-testid="spec-chart"] svg path', { timeout: 10000 });
  // Quantized weights: brrr-serve's formats in wasm. Smaller int4 groups isolate the
  // outliers, so the error falls.
  const formats = await page.$$eval('[data-testid="quant-row"]', (rs) => rs.map((r) => r.dataset.format));
  check(formats.join(',') === 'f32,int8,int4-g32,fp8-e4m3', `f32 and three formats (${formats})`);
  const err32 = await value(page, 'quant-int4-error');
  check(err32 > 0 && err32 < 1, `int4 in groups of 32: RMS error ${err32}`);
  await setSize(page, 'quant-group', 8);
  const err8 = await waitValue(page, 'quant-int4-error', (v) => v < err32);
  check(err8 < err32, `groups of 8: RMS error ${err8} < ${err32}`);
  await shot(page, 'serving');
  await page.close();
}

(async () => {
  fs.mkdirSync(shots, { recursive: true });
  const browser = await puppeteer.launch({ executablePath: CHROME, headless: true, args: FLAGS });
  try {
    const only = process.env.BRRR_E2E_ONLY;
    for (const [name, f] of [['landing', landing], ['roofline', roofline], ['memory', memory], ['plan', planPage], ['kernels', kernels], ['train', train], ['puzzles', puzzles], ['checkpointing', checkpointing], ['collectives', collectives],
      ['mixed-precision', mixedPrecision], ['data-loading', dataLoading], ['data-parallel', dataParallel],
      ['tensor-parallel', tensorParallel], ['pipeline', pipelinePage], ['profile', profilePage], ['serving', serving]]) {
      if (only && !only.split(',').includes(name)) {
        console.log(`${name}: SKIPPED (BRRR_E2E_ONLY=${only})`);
        continue;
      }
      const t0 = Date.now();
      try {
        await f(browser);
      } catch (e) {
        check(false, `${name}: ${e.message}`);
      }
      metrics[`${name}_s`] = (Date.now() - t0) / 1000;
    }
  } finally {
    await browser.close();
  }
  for (const e of errors) check(false, e);
  console.log(`METRICS ${JSON.stringify(metrics)}`);
  if (failures > 0) {
    console.log(`${failures} check(s) failed`);
    process.exit(1);
  }
  console.log('all end-to-end checks passed');
})();
