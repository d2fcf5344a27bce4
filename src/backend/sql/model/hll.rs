//! HyperLogLog commands (PFADD, PFCOUNT, PFMERGE) over plain string values.
//!
//! Redis keeps an HLL in an ordinary string, so a client can GET it, SET it
//! back, or hand us arbitrary bytes. This module owns that byte layout and
//! reproduces Redis 7.0.15 exactly: the 16-byte header ("HYLL", encoding,
//! three spare bytes, little-endian cached cardinality whose top bit marks the
//! cache stale), the sparse run-length opcodes (ZERO, XZERO, VAL) with their
//! in-place splitting and merging, promotion to the dense 6-bit register array
//! at `hll-sparse-max-bytes` (3000) or when a register exceeds 32, the
//! estimator, and the validation that tells "not an HLL" from "corrupt HLL".
//!
//! Everything is pure: callers load the stored value(s), call one function and
//! store what it returns. Malformed input never panics; it is handled the way
//! Redis handles it, down to Redis reading the string's NUL terminator when a
//! two-byte XZERO opcode is cut short at the end of the value.
//!
//! Two Redis behaviours on corrupt values are outside what a stored string
//! can express: a PFADD that fails half-way keeps its earlier edits in Redis,
//! and writing into a truncated trailing XZERO leaves a byte in Redis's NUL
//! slot that later commands read again. Valid HLLs never hit either.

/// Why a stored value is not usable as an HLL.
#[derive(Debug, PartialEq, Eq)]
pub enum HllError {
    /// Redis: `WRONGTYPE Key is not a valid HyperLogLog string value.`
    NotHll,
    /// Redis: `INVALIDOBJ Corrupted HLL object detected`
    Corrupt,
}

/// Header: magic, encoding byte, 3 spare bytes, 8 cache bytes.
const HDR: usize = 16;
const MAGIC: &[u8; 4] = b"HYLL";
/// Offset of the encoding byte inside the header.
const ENC_AT: usize = 4;
/// Offset of the cached cardinality (little endian) inside the header.
const CARD_AT: usize = 8;
/// Byte holding the cache's "stale" flag (top bit of the last cache byte).
const STALE_AT: usize = 15;
const STALE_BIT: u8 = 0x80;

const DENSE: u8 = 0;
const SPARSE: u8 = 1;
/// Highest encoding byte Redis accepts; anything above is "not an HLL".
const MAX_ENCODING: u8 = SPARSE;

/// 2^14 registers, 6 bits each.
const P: u32 = 14;
const REGISTERS: usize = 1 << P;
const REG_BITS: usize = 6;
const REG_MASK: u32 = (1 << REG_BITS) - 1;
const DENSE_SIZE: usize = HDR + (REGISTERS * REG_BITS).div_ceil(8);
/// Hash bits left after the index; a run can be at most Q+1 long.
const Q: usize = 64 - P as usize;

/// Redis's default `hll-sparse-max-bytes`: past it a sparse HLL goes dense.
pub const SPARSE_MAX_BYTES: usize = 3000;
const VAL_MAX_VALUE: u8 = 32;
const VAL_MAX_LEN: usize = 4;
const ZERO_MAX_LEN: usize = 64;
const XZERO_MAX_LEN: usize = REGISTERS;

const HASH_SEED: u64 = 0xadc8_3b19;
/// 0.5 / ln 2, the bias constant of the estimator Redis uses (this literal
/// is the same f64 as Redis's longer one).
const ALPHA_INF: f64 = 0.721_347_520_444_481_7;

/// Empty HLL as Redis creates it: sparse, one XZERO spanning every register.
fn new_sparse() -> Vec<u8> {
    let mut v = Vec::with_capacity(HDR + 2);
    v.extend_from_slice(MAGIC);
    v.push(SPARSE);
    v.extend_from_slice(&[0; HDR - 5]);
    v.extend_from_slice(&xzero_bytes(XZERO_MAX_LEN));
    v
}

/// Redis's `isHLLObjectOrReply`: returns the encoding byte of a usable value.
fn check(value: &[u8]) -> Result<u8, HllError> {
    if value.len() < HDR || &value[..4] != MAGIC {
        return Err(HllError::NotHll);
    }
    let enc = value[ENC_AT];
    // A dense value must have exactly the register array; sparse lengths are
    // only checked while decoding, which is why that yields Corrupt instead.
    if enc > MAX_ENCODING || (enc == DENSE && value.len() != DENSE_SIZE) {
        return Err(HllError::NotHll);
    }
    Ok(enc)
}

// ---------------------------------------------------------------------------
// Working buffer
// ---------------------------------------------------------------------------

/// A value being modified, modelled on Redis's sds string: `len` visible
/// bytes followed by a terminator (normally 0) and slack. Redis's sparse code
/// reads the terminator when an XZERO is truncated and can even write past the
/// visible end; keeping those bytes lets us follow it exactly within a call.
#[derive(Clone)]
struct HllBytes {
    mem: Vec<u8>,
    len: usize,
}

impl HllBytes {
    fn new(value: &[u8]) -> HllBytes {
        let mut mem = Vec::with_capacity(value.len() + 8);
        mem.extend_from_slice(value);
        mem.push(0);
        HllBytes {
            mem,
            len: value.len(),
        }
    }

    fn at(&self, i: usize) -> u8 {
        byte(&self.mem, i)
    }

    fn put(&mut self, i: usize, b: u8) {
        if i >= self.mem.len() {
            self.mem.resize(i + 1, 0);
        }
        if let Some(slot) = self.mem.get_mut(i) {
            *slot = b;
        }
    }

    /// sdsIncrLen: new visible length, terminator rewritten right after it.
    fn set_len(&mut self, len: usize) {
        self.len = len;
        self.put(len, 0);
    }

    /// memmove of `n` bytes from `src` to `dst`.
    fn shift(&mut self, src: usize, dst: usize, n: usize) {
        let need = src.max(dst) + n;
        if need > self.mem.len() {
            self.mem.resize(need, 0);
        }
        self.mem.copy_within(src..src + n, dst);
    }

    fn encoding(&self) -> u8 {
        self.at(ENC_AT)
    }

    fn invalidate_cache(&mut self) {
        let b = self.at(STALE_AT) | STALE_BIT;
        self.put(STALE_AT, b);
    }

    fn into_bytes(mut self) -> Vec<u8> {
        self.mem.truncate(self.len);
        self.mem
    }
}

/// Byte `i`, or 0 past the end: Redis strings are NUL-terminated, so an
/// opcode cut short reads a zero byte there.
fn byte(mem: &[u8], i: usize) -> u8 {
    mem.get(i).copied().unwrap_or(0)
}

// ---------------------------------------------------------------------------
// Hashing
// ---------------------------------------------------------------------------

/// MurmurHash64A, read little-endian as Redis does on every platform.
fn murmur64a(key: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (key.len() as u64).wrapping_mul(M);
    let blocks = key.chunks_exact(8);
    let tail = blocks.remainder();
    for block in blocks {
        let mut k = block
            .iter()
            .rev()
            .fold(0u64, |a, &b| (a << 8) | u64::from(b));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate() {
            h ^= u64::from(b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// Register index and run length (trailing zeros + 1) for one element.
fn pattern(element: &[u8]) -> (usize, u8) {
    let hash = murmur64a(element, HASH_SEED);
    let index = (hash & (REGISTERS as u64 - 1)) as usize;
    // The sentinel bit caps the run at Q+1 so the count always fits.
    let rest = (hash >> P) | (1u64 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

// ---------------------------------------------------------------------------
// Dense registers
// ---------------------------------------------------------------------------

/// Register `reg` of a dense value (6 bits, packed from the LSB up).
fn dense_get(mem: &[u8], reg: usize) -> u8 {
    let at = HDR + reg * REG_BITS / 8;
    let fb = (reg * REG_BITS) & 7;
    let b0 = u32::from(byte(mem, at));
    let b1 = u32::from(byte(mem, at + 1));
    (((b0 >> fb) | (b1 << (8 - fb))) & REG_MASK) as u8
}

/// Unconditional store of a register (both bytes it may straddle).
fn dense_write(s: &mut HllBytes, reg: usize, val: u8) {
    let at = HDR + reg * REG_BITS / 8;
    let fb = (reg * REG_BITS) & 7;
    let v = u32::from(val);
    let b0 = (u32::from(s.at(at)) & !(REG_MASK << fb)) | (v << fb);
    s.put(at, b0 as u8);
    let b1 = (u32::from(s.at(at + 1)) & !(REG_MASK >> (8 - fb))) | (v >> (8 - fb));
    s.put(at + 1, b1 as u8);
}

/// Raise a register to `val` if it is lower; true when it changed.
fn dense_set(s: &mut HllBytes, reg: usize, val: u8) -> bool {
    if val > dense_get(&s.mem, reg) {
        dense_write(s, reg, val);
        true
    } else {
        false
    }
}

// ---------------------------------------------------------------------------
// Sparse opcodes
// ---------------------------------------------------------------------------

/// One decoded sparse opcode. Run lengths are register counts.
#[derive(Clone, Copy)]
enum SparseOp {
    /// 00xxxxxx: 1..=64 zero registers.
    Zero(usize),
    /// 01xxxxxx yyyyyyyy: 1..=16384 zero registers.
    XZero(usize),
    /// 1vvvvvxx: 1..=4 registers holding 1..=32.
    Val(u8, usize),
}

impl SparseOp {
    fn width(self) -> usize {
        match self {
            SparseOp::XZero(_) => 2,
            _ => 1,
        }
    }

    fn run(self) -> usize {
        match self {
            SparseOp::Zero(n) | SparseOp::XZero(n) | SparseOp::Val(_, n) => n,
        }
    }
}

fn is_xzero(b: u8) -> bool {
    b & 0xc0 == 0x40
}

fn is_zero(b: u8) -> bool {
    b & 0xc0 == 0
}

fn is_val(b: u8) -> bool {
    b & 0x80 != 0
}

fn val_value(b: u8) -> u8 {
    ((b >> 2) & 0x1f) + 1
}

fn val_len(b: u8) -> usize {
    usize::from(b & 0x3) + 1
}

/// Decode the opcode at `p`; an XZERO's second byte may be the terminator.
fn decode(mem: &[u8], p: usize) -> SparseOp {
    let b = byte(mem, p);
    if is_zero(b) {
        SparseOp::Zero(usize::from(b & 0x3f) + 1)
    } else if is_val(b) {
        SparseOp::Val(val_value(b), val_len(b))
    } else {
        SparseOp::XZero(((usize::from(b & 0x3f) << 8) | usize::from(byte(mem, p + 1))) + 1)
    }
}

fn val_byte(value: u8, len: usize) -> u8 {
    0x80 | ((value - 1) << 2) | (len as u8 - 1)
}

fn xzero_bytes(len: usize) -> [u8; 2] {
    let l = len - 1;
    [0x40 | (l >> 8) as u8, (l & 0xff) as u8]
}

/// Append the shortest zero opcode for `len` registers (Redis's choice).
fn push_zeros(seq: &mut Vec<u8>, len: usize) {
    if len > ZERO_MAX_LEN {
        seq.extend_from_slice(&xzero_bytes(len));
    } else {
        seq.push(len as u8 - 1);
    }
}

/// Walk the sparse runs, calling `visit(register, value)` for every register a
/// VAL covers. True when the runs cover exactly every register. Any run that
/// would pass the last register makes the value corrupt: that is the rule of
/// the Redis 7.0.15 build we verify against (Debian's, carrying the upstream
/// CVE-2025-32023 fix also found in 7.2.10+); pristine 7.0.15 let a VAL run
/// past the end stop the walk silently in PFMERGE and multi-key PFCOUNT.
fn sparse_walk(mem: &[u8], len: usize, mut visit: impl FnMut(usize, u8)) -> bool {
    let mut idx = 0usize;
    let mut p = HDR;
    while p < len {
        let op = decode(mem, p);
        if idx + op.run() > REGISTERS {
            return false;
        }
        if let SparseOp::Val(v, n) = op {
            for reg in idx..idx + n {
                visit(reg, v);
            }
        }
        idx += op.run();
        p += op.width();
    }
    idx == REGISTERS
}

/// Sparse to dense, keeping the header (magic, spare bytes and the cache,
/// stale flag included). A dense input is returned as is. None: corrupt.
fn to_dense(s: &HllBytes) -> Option<HllBytes> {
    if s.encoding() == DENSE {
        return Some(s.clone());
    }
    let mut d = HllBytes::new(&[0u8; DENSE_SIZE]);
    for i in 0..HDR {
        d.put(i, s.at(i));
    }
    d.put(ENC_AT, DENSE);
    let complete = sparse_walk(&s.mem, s.len, |reg, v| dense_write(&mut d, reg, v));
    complete.then_some(d)
}

/// Where register `index` lives in a sparse value.
struct Located {
    /// Offset of the opcode covering the register.
    p: usize,
    /// First register that opcode covers.
    first: usize,
    /// Offset of the opcode before it, if any.
    prev: Option<usize>,
    op: SparseOp,
}

fn locate(s: &HllBytes, index: usize) -> Option<Located> {
    let mut p = HDR;
    let mut first = 0usize;
    let mut prev = None;
    while p < s.len {
        let op = decode(&s.mem, p);
        if index < first + op.run() {
            return Some(Located { p, first, prev, op });
        }
        prev = Some(p);
        p += op.width();
        first += op.run();
    }
    None
}

/// The opcodes replacing `op` once register `index` is set to `count`:
/// left remainder, the single new VAL, right remainder.
fn split(op: SparseOp, first: usize, index: usize, count: u8) -> Vec<u8> {
    let last = first + op.run() - 1;
    let mut seq = Vec::with_capacity(5);
    match op {
        SparseOp::Val(cur, _) => {
            if index != first {
                seq.push(val_byte(cur, index - first));
            }
            seq.push(val_byte(count, 1));
            if index != last {
                seq.push(val_byte(cur, last - index));
            }
        }
        SparseOp::Zero(_) | SparseOp::XZero(_) => {
            if index != first {
                push_zeros(&mut seq, index - first);
            }
            seq.push(val_byte(count, 1));
            if index != last {
                push_zeros(&mut seq, last - index);
            }
        }
    }
    seq
}

/// Redis's post-update pass: starting at `from`, look at up to five opcodes
/// and fuse neighbouring VALs of equal value while the run still fits.
fn merge_adjacent(s: &mut HllBytes, from: usize) {
    let mut p = from;
    let mut budget = 5;
    while p < s.len && budget > 0 {
        budget -= 1;
        let b = s.at(p);
        if is_xzero(b) {
            p += 2;
            continue;
        }
        if is_zero(b) {
            p += 1;
            continue;
        }
        let nb = s.at(p + 1);
        if p + 1 < s.len && is_val(nb) && val_value(b) == val_value(nb) {
            let run = val_len(b) + val_len(nb);
            if run <= VAL_MAX_LEN {
                s.put(p + 1, val_byte(val_value(b), run));
                let tail = s.len - p;
                s.shift(p + 1, p, tail);
                s.set_len(s.len - 1);
                // Stay on p: the fused run may fuse again with its right side.
                continue;
            }
        }
        p += 1;
    }
}

/// Convert to dense and set the register there (Redis's promotion path).
fn promote_and_set(s: &mut HllBytes, index: usize, count: u8) -> Result<bool, HllError> {
    let mut d = to_dense(s).ok_or(HllError::Corrupt)?;
    let changed = dense_set(&mut d, index, count);
    *s = d;
    Ok(changed)
}

/// Redis's `hllSparseSet`: raise register `index` to `count` in place,
/// promoting to dense when the value cannot stay sparse. Ok(true) when the
/// register changed; Err(Corrupt) when the runs do not reach `index` or the
/// promotion finds the value corrupt.
fn sparse_set(s: &mut HllBytes, index: usize, count: u8) -> Result<bool, HllError> {
    if count > VAL_MAX_VALUE {
        return promote_and_set(s, index, count);
    }
    let Located { p, first, prev, op } = locate(s, index).ok_or(HllError::Corrupt)?;
    let end = s.len;
    let next = Some(p + op.width()).filter(|&n| n < end);
    match op {
        SparseOp::Val(cur, _) if cur >= count => return Ok(false),
        // A run of one is overwritten in place: no size change.
        SparseOp::Val(_, 1) | SparseOp::Zero(1) => s.put(p, val_byte(count, 1)),
        _ => {
            let seq = split(op, first, index, count);
            let grow = seq.len() as isize - op.width() as isize;
            if grow > 0 && end + grow as usize > SPARSE_MAX_BYTES {
                return promote_and_set(s, index, count);
            }
            if grow != 0 {
                if let Some(n) = next {
                    s.shift(n, n.saturating_add_signed(grow), end - n);
                }
            }
            s.set_len(end.saturating_add_signed(grow));
            // Written after the length change, as Redis does: with a
            // truncated trailing XZERO part of it lands past the end.
            for (k, &b) in seq.iter().enumerate() {
                s.put(p + k, b);
            }
        }
    }
    merge_adjacent(s, prev.unwrap_or(HDR));
    s.invalidate_cache();
    Ok(true)
}

// ---------------------------------------------------------------------------
// Estimation
// ---------------------------------------------------------------------------

/// Bound on the series loops: they converge in well under 100 steps on any
/// input Redis can answer for; the cap only stops pathological spinning.
const SERIES_CAP: usize = 100_000;

/// Ertl's sigma function (arXiv:1702.01284), evaluated like Redis.
fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let mut y = 1.0;
    let mut z = x;
    for _ in 0..SERIES_CAP {
        x *= x;
        let before = z;
        z += x * y;
        y += y;
        if before == z {
            break;
        }
    }
    z
}

/// Ertl's tau function, evaluated like Redis (pow(v, 2) is v*v in its build).
fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let mut y = 1.0;
    let mut z = 1.0 - x;
    for _ in 0..SERIES_CAP {
        x = x.sqrt();
        let before = z;
        y *= 0.5;
        let d = 1.0 - x;
        z -= d * d * y;
        if before == z {
            break;
        }
    }
    z / 3.0
}

/// Cardinality from the register histogram, bit-for-bit Redis's hllCount.
fn estimate(hist: &[u64; 64]) -> u64 {
    let m = REGISTERS as f64;
    let mut z = m * tau((m - hist[Q + 1] as f64) / m);
    for &h in hist[1..=Q].iter().rev() {
        z += h as f64;
        z *= 0.5;
    }
    z += m * sigma(hist[0] as f64 / m);
    let e = ALPHA_INF * m * m / z;
    // Redis rounds with llroundl; out of range (only reachable with
    // hand-made dense registers) x86 yields the "integer indefinite" value,
    // which Redis then replies as a negative long long.
    if e < 9_223_372_036_854_775_808.0 {
        e.round() as u64
    } else {
        1 << 63
    }
}

fn dense_histogram(mem: &[u8], hist: &mut [u64; 64]) {
    for reg in 0..REGISTERS {
        hist[usize::from(dense_get(mem, reg))] += 1;
    }
}

/// Fold one validated value into per-register maxima (Redis's hllMerge).
fn merge_into(max: &mut [u8; REGISTERS], value: &[u8], enc: u8) -> Result<(), HllError> {
    if enc == DENSE {
        for (reg, m) in max.iter_mut().enumerate() {
            *m = (*m).max(dense_get(value, reg));
        }
        return Ok(());
    }
    let complete = sparse_walk(value, value.len(), |reg, v| {
        if let Some(m) = max.get_mut(reg) {
            *m = (*m).max(v);
        }
    });
    if complete {
        Ok(())
    } else {
        Err(HllError::Corrupt)
    }
}

// ---------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------

/// PFADD: adds `elements` to `current` (None: the key does not exist). Returns the new value to store (None when nothing changed and the key existed) and whether any register changed (PFADD's 1/0 reply; a new key with no elements still returns true and an empty HLL).
///
/// # Errors
/// `NotHll` for a value that is not an HLL string; `Corrupt` when a sparse
/// value's runs do not reach an element's register (or cannot be made dense).
/// The caller then stores nothing, whereas Redis keeps the edits made by the
/// elements before the failing one: to mirror that, store the result of
/// `pfadd` on the longest prefix of `elements` that succeeds.
pub fn pfadd(
    current: Option<&[u8]>,
    elements: &[&[u8]],
) -> Result<(Option<Vec<u8>>, bool), HllError> {
    let (mut s, mut updated) = match current {
        None => (HllBytes::new(&new_sparse()), true),
        Some(v) => {
            check(v)?;
            (HllBytes::new(v), false)
        }
    };
    for element in elements {
        let (index, count) = pattern(element);
        let changed = if s.encoding() == DENSE {
            dense_set(&mut s, index, count)
        } else {
            sparse_set(&mut s, index, count)?
        };
        updated |= changed;
    }
    if !updated {
        return Ok((None, false));
    }
    s.invalidate_cache();
    Ok((Some(s.into_bytes()), true))
}

/// PFCOUNT of one key: the cardinality, and the value to store back when Redis would update the cached cardinality in place (Redis writes the cache into the string on PFCOUNT of a single key).
///
/// Redis replies with the count as a signed 64-bit integer (`card as i64`);
/// only a hand-crafted dense value can reach 2^63, which it then prints
/// negative. A valid cache is returned as is, without looking at registers.
///
/// # Errors
/// `NotHll` for a value that is not an HLL string; `Corrupt` when the cache
/// is stale and the sparse runs do not cover exactly 16384 registers.
pub fn pfcount_one(value: &[u8]) -> Result<(u64, Option<Vec<u8>>), HllError> {
    let enc = check(value)?;
    let mut cache = [0u8; 8];
    cache.copy_from_slice(&value[CARD_AT..HDR]);
    if value[STALE_AT] & STALE_BIT == 0 {
        // Trusted as is, even if the registers behind it are corrupt.
        return Ok((u64::from_le_bytes(cache), None));
    }
    let mut hist = [0u64; 64];
    if enc == DENSE {
        dense_histogram(value, &mut hist);
    } else {
        let complete = sparse_walk(value, value.len(), |_, v| hist[usize::from(v)] += 1);
        if !complete {
            return Err(HllError::Corrupt);
        }
        // Every register not covered by a VAL is zero.
        hist[0] = REGISTERS as u64 - hist.iter().sum::<u64>();
    }
    let card = estimate(&hist);
    let mut out = value.to_vec();
    out[CARD_AT..HDR].copy_from_slice(&card.to_le_bytes());
    Ok((card, Some(out)))
}

/// PFCOUNT of several keys (their union, nothing stored); None entries are missing keys.
///
/// This is Redis's multi-key path: no cache is read or written, so call it
/// only when the command names two or more keys.
///
/// # Errors
/// The first failing key in order decides: `NotHll` or `Corrupt`.
pub fn pfcount_many(values: &[Option<&[u8]>]) -> Result<u64, HllError> {
    let mut max = [0u8; REGISTERS];
    for value in values.iter().flatten() {
        let enc = check(value)?;
        merge_into(&mut max, value, enc)?;
    }
    let mut hist = [0u64; 64];
    for &r in &max {
        hist[usize::from(r)] += 1;
    }
    Ok(estimate(&hist))
}

/// PFMERGE: the value `dest` ends with (dest's current value first if it exists, then the sources).
///
/// As in Redis 7.0.15 the result stays sparse (built by setting registers one
/// by one into dest's existing bytes, which may promote it) unless some input
/// — dest included — is dense, in which case dest is converted first. The
/// cache is always marked stale, even when nothing changed.
///
/// # Errors
/// The first failing value in order (dest, then sources) decides: `NotHll`
/// or `Corrupt`; nothing is written then.
pub fn pfmerge(dest: Option<&[u8]>, sources: &[Option<&[u8]>]) -> Result<Vec<u8>, HllError> {
    let mut max = [0u8; REGISTERS];
    let mut use_dense = false;
    for value in std::iter::once(dest)
        .chain(sources.iter().copied())
        .flatten()
    {
        let enc = check(value)?;
        use_dense |= enc == DENSE;
        merge_into(&mut max, value, enc)?;
    }
    let mut s = HllBytes::new(&dest.map_or_else(new_sparse, <[u8]>::to_vec));
    if use_dense {
        s = to_dense(&s).ok_or(HllError::Corrupt)?;
    }
    for (reg, &v) in max.iter().enumerate() {
        if v == 0 {
            continue;
        }
        if s.encoding() == DENSE {
            dense_set(&mut s, reg, v);
        } else {
            // Redis ignores a failure here; dest was already validated.
            let _ = sparse_set(&mut s, reg, v);
        }
    }
    s.invalidate_cache();
    Ok(s.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpha_matches_redis_literal() {
        assert_eq!("0.721347520444481703680".parse::<f64>(), Ok(ALPHA_INF));
    }

    #[test]
    fn new_key_without_elements_is_empty_sparse_with_stale_cache() {
        let (v, changed) = pfadd(None, &[]).unwrap();
        assert!(changed);
        assert_eq!(v.unwrap(), b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\x80\x7f\xff");
    }

    #[test]
    fn count_writes_cache_once() {
        let (v, _) = pfadd(None, &[b"a", b"b", b"c"]).unwrap();
        let (n, stored) = pfcount_one(&v.unwrap()).unwrap();
        assert_eq!(n, 3);
        let stored = stored.unwrap();
        assert_eq!(stored[8..16], 3u64.to_le_bytes());
        assert_eq!(pfcount_one(&stored).unwrap(), (3, None));
    }

    #[test]
    fn validation_kinds() {
        assert_eq!(pfcount_one(b"HYLL"), Err(HllError::NotHll));
        assert_eq!(
            pfcount_one(b"HYLL\x02\0\0\0\0\0\0\0\0\0\0\x80\x7f\xff"),
            Err(HllError::NotHll)
        );
        assert_eq!(
            pfcount_one(b"HYLL\x00\0\0\0\0\0\0\0\0\0\0\x80\x7f\xff"),
            Err(HllError::NotHll)
        );
        assert_eq!(
            pfcount_one(b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\x80\x7f\xfe"),
            Err(HllError::Corrupt)
        );
        assert_eq!(
            pfcount_many(&[Some(b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\x80\x7f\xfe")]),
            Err(HllError::Corrupt)
        );
    }
}
