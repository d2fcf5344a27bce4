//! Result ordering as Redis 7.0.15 leaves it on this platform.
//!
//! A full sort goes through glibc's qsort, which (glibc 2.36, enough memory)
//! is a top-down merge sort and therefore stable. A partial sort (COUNT
//! smaller than the number of matches, without ANY) goes through Redis's own
//! pqsort, a Bentley-McIlroy quicksort that skips partitions outside the
//! wanted prefix; its order among equal distances is reproduced here step
//! by step. Both use the comparator "1 if a > b, 0 if equal, else -1", which
//! is not a total order when a distance is NaN; the emulations below simply
//! follow the same comparisons.

use std::cmp::Ordering;

/// A three-way comparator on items.
type Cmp<'a, T> = dyn Fn(&T, &T) -> Ordering + 'a;

/// Redis's ascending comparator on two distances.
fn cmp_asc(a: f64, b: f64) -> Ordering {
    if a > b {
        Ordering::Greater
    } else if a == b {
        Ordering::Equal
    } else {
        Ordering::Less
    }
}

/// glibc's msort: halve (left half n/2), sort both, merge.
fn merge_sort<T: Clone>(v: &mut [T], cmp: &Cmp<'_, T>) {
    let n = v.len();
    if n <= 1 {
        return;
    }
    let n1 = n / 2;
    merge_sort(&mut v[..n1], cmp);
    merge_sort(&mut v[n1..], cmp);
    let mut merged = Vec::with_capacity(n);
    let (mut i, mut j) = (0, n1);
    while i < n1 && j < n {
        // Ties take the left element, which keeps the sort stable.
        if cmp(&v[i], &v[j]) != Ordering::Greater {
            merged.push(v[i].clone());
            i += 1;
        } else {
            merged.push(v[j].clone());
            j += 1;
        }
    }
    merged.extend_from_slice(&v[i..n1]);
    merged.extend_from_slice(&v[j..n]);
    v.clone_from_slice(&merged);
}

/// med3 of Bentley-McIlroy, on indices.
fn med3<T>(v: &[T], a: usize, b: usize, c: usize, cmp: &Cmp<'_, T>) -> usize {
    let lt = |x: usize, y: usize| cmp(&v[x], &v[y]) == Ordering::Less;
    let gt = |x: usize, y: usize| cmp(&v[x], &v[y]) == Ordering::Greater;
    if lt(a, b) {
        if lt(b, c) {
            b
        } else if lt(a, c) {
            c
        } else {
            a
        }
    } else if gt(b, c) {
        b
    } else if lt(a, c) {
        a
    } else {
        c
    }
}

/// Swap the `n` elements starting at `a` with the `n` starting at `b`.
fn vec_swap<T>(v: &mut [T], a: usize, b: usize, n: usize) {
    for k in 0..n {
        v.swap(a + k, b + k);
    }
}

/// Pick the pivot as pqsort does and move it to the front of `v`.
fn place_pivot<T>(v: &mut [T], cmp: &Cmp<'_, T>) {
    let n = v.len();
    let mut pm = n / 2;
    if n > 7 {
        let mut pl = 0;
        let mut pn = n - 1;
        if n > 40 {
            let d = n / 8;
            pl = med3(v, pl, pl + d, pl + 2 * d, cmp);
            pm = med3(v, pm - d, pm, pm + d, cmp);
            pn = med3(v, pn - 2 * d, pn - d, pn, cmp);
        }
        pm = med3(v, pl, pm, pn, cmp);
    }
    v.swap(0, pm);
}

/// Three-way partition around v[0]; returns (pa, pb, pc, pd) as pqsort
/// leaves its pointers (pc and pd may sit one before the start, hence isize).
fn partition<T>(v: &mut [T], cmp: &Cmp<'_, T>) -> (usize, usize, isize, isize) {
    let n = v.len();
    let (mut pa, mut pb) = (1usize, 1usize);
    let (mut pc, mut pd) = (n as isize - 1, n as isize - 1);
    loop {
        while pb as isize <= pc {
            let r = cmp(&v[pb], &v[0]);
            if r == Ordering::Greater {
                break;
            }
            if r == Ordering::Equal {
                v.swap(pa, pb);
                pa += 1;
            }
            pb += 1;
        }
        while pb as isize <= pc {
            // pc >= pb >= 1 inside this loop, so the index is valid.
            let r = cmp(&v[pc as usize], &v[0]);
            if r == Ordering::Less {
                break;
            }
            if r == Ordering::Equal {
                v.swap(pc as usize, pd as usize);
                pd -= 1;
            }
            pc -= 1;
        }
        if pb as isize > pc {
            return (pa, pb, pc, pd);
        }
        v.swap(pb, pc as usize);
        pb += 1;
        pc -= 1;
    }
}

/// Redis's pqsort on `v`, where `base` is v's offset in the whole array and
/// `right` the last index of the prefix that must end up sorted.
fn pqsort<T>(v: &mut [T], base: usize, right: usize, cmp: &Cmp<'_, T>) {
    let n = v.len();
    if n < 7 {
        for m in 1..n {
            let mut l = m;
            while l > 0 && cmp(&v[l - 1], &v[l]) == Ordering::Greater {
                v.swap(l, l - 1);
                l -= 1;
            }
        }
        return;
    }
    place_pivot(v, cmp);
    let (pa, pb, pc, pd) = partition(v, cmp);
    // Move the runs equal to the pivot from both ends into the middle.
    let r = pa.min(pb - pa);
    vec_swap(v, 0, pb - r, r);
    // pd >= pc >= 0 here, since v[0] stops the downward scan.
    let (pc, pd) = (pc as usize, pd as usize);
    let r = (pd - pc).min(n - pd - 1);
    vec_swap(v, pb, n - r, r);
    // Recurse into the "less" part and then the "greater" part, but only
    // when they overlap the wanted prefix [0, right].
    let less = pb - pa;
    if less > 1 && right >= base {
        pqsort(&mut v[..less], base, right, cmp);
    }
    let greater = pd - pc;
    let start = n - greater;
    if greater > 1 && right >= base + start {
        pqsort(&mut v[start..], base + start, right, cmp);
    }
}

/// How Redis orders the matches before replying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sort {
    /// No ASC/DESC (and no COUNT, or COUNT with ANY): scan order.
    Unsorted,
    Asc,
    Desc,
}

/// Arrange `items` (in scan order) as Redis does before replying, given
/// their distances, the sort requested (already defaulted to Asc when Redis
/// does so: COUNT without ANY and without ASC/DESC) and COUNT (0 = none).
/// Returns how many leading items make up the reply.
pub fn arrange<T: Clone>(
    items: &mut [T],
    dist: impl Fn(&T) -> f64,
    sort: Sort,
    count: u64,
) -> usize {
    let len = items.len();
    let returned = match usize::try_from(count) {
        Ok(c) if c != 0 && c < len => c,
        // 0 means unlimited; a count beyond usize is beyond the length too.
        _ => len,
    };
    let cmp: Box<Cmp<'_, T>> = match sort {
        Sort::Unsorted => return returned,
        Sort::Asc => Box::new(|a: &T, b: &T| cmp_asc(dist(a), dist(b))),
        Sort::Desc => Box::new(|a: &T, b: &T| cmp_asc(dist(a), dist(b)).reverse()),
    };
    if returned == len {
        merge_sort(items, &*cmp);
    } else if returned > 0 {
        pqsort(items, 0, returned - 1, &*cmp);
    }
    returned
}
