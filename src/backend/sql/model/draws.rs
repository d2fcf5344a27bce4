//! Elements drawn at random (`SRANDMEMBER`, `SPOP`, `HRANDFIELD`, `ZRANDMEMBER`): by index
//! probes where the draw is small beside the collection, so its cost follows the count, as
//! in Redis, not the collection's size; from the whole collection where the count reaches
//! half of it (reading it all then costs no more than twice the count).
//!
//! A probe is an id drawn between the key's smallest and largest element id, and the first
//! element from there (the `(key, id)` index). An element after a run of removed ones is
//! drawn more often than one after none: Redis's own draw is not uniform either.

use super::store::{fail, stmt, Ctx, Fail, Kind};
use bytes::Bytes;

/// Most elements a negative count draws (with repeats): a larger reply is refused rather
/// than built.
const MOST_REPEATS: u64 = 10_000_000;

/// How a draw of `count` reads a collection of `len` elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrawPlan {
    /// Read it whole and draw from what was read.
    Whole,
    /// `draws` index probes; `distinct`: no element twice.
    Probes { draws: usize, distinct: bool },
}

/// The plan for `count` (Redis's: positive, distinct elements, all of them once it reaches
/// the size; negative, that many with repeats) over `len` elements.
pub fn plan(len: i64, count: i64) -> DrawPlan {
    let len = u64::try_from(len).unwrap_or(0);
    let n = count.unsigned_abs();
    let draws = usize::try_from(n).unwrap_or(usize::MAX);
    if count >= 0 {
        // Distinct draws past half the collection would probe on and on for the last few.
        if n.saturating_mul(2) >= len {
            DrawPlan::Whole
        } else {
            DrawPlan::Probes {
                draws,
                distinct: true,
            }
        }
    } else if n >= len {
        DrawPlan::Whole
    } else {
        DrawPlan::Probes {
            draws,
            distinct: false,
        }
    }
}

/// Elements drawn from `all` (the whole collection, in its order) the way a count draws
/// them: for a positive count, distinct ones (all of them, in their order, when it reaches
/// the size); for a negative one, that many with repeats (bounded by [`MOST_REPEATS`]).
///
/// # Errors
/// An error reply for a negative count past [`MOST_REPEATS`].
pub fn from_whole<T: Clone>(all: Vec<T>, count: i64) -> Result<Vec<T>, Fail> {
    use rand::seq::SliceRandom;
    let mut rng = rand::thread_rng();
    let n = usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX);
    if count >= 0 {
        return Ok(if n >= all.len() {
            all
        } else {
            all.choose_multiple(&mut rng, n).cloned().collect()
        });
    }
    if all.is_empty() {
        return Ok(Vec::new());
    }
    if count.unsigned_abs() > MOST_REPEATS {
        return fail("ERR value is out of range");
    }
    Ok((0..n)
        .filter_map(|_| all.choose(&mut rng).cloned())
        .collect())
}

/// The table and the columns of a kind that draws by id: its name, and its value (a hash
/// field's) if it has one.
fn table(kind: Kind) -> Option<(&'static str, &'static str, &'static str)> {
    match kind {
        Kind::Set => Some(("hf_set", "member", "NULL")),
        Kind::Hash => Some(("hf_hash", "field", "value")),
        _ => None,
    }
}

/// A draw of `count` from the set or hash at `key` by index probes (see [`probes`]): nothing
/// for a missing or expired collection (WRONGTYPE for another kind); None when the caller
/// draws from the whole collection instead ([`from_whole`]), as the plan says or as the
/// probes gave up.
///
/// # Errors
/// The database's; WRONGTYPE; an error reply for more than [`MOST_REPEATS`] draws.
pub async fn counted(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    kind: Kind,
    count: i64,
) -> Result<Option<Vec<(Bytes, Option<Bytes>)>>, Fail> {
    // Live, with the count its row keeps (an expired key's stored count is not an answer).
    let Some(meta) = ctx.typed(key, kind).await? else {
        return Ok(Some(Vec::new()));
    };
    match plan(meta.len, count) {
        DrawPlan::Probes { draws, distinct } => probes(ctx, key, kind, draws, distinct).await,
        DrawPlan::Whole => Ok(None),
    }
}

/// One element of the set or hash at `key` (a member, or a field), drawn at random; None
/// when the collection is empty or missing.
///
/// # Errors
/// The database's.
pub async fn one(ctx: &mut Ctx<'_>, key: &[u8], kind: Kind) -> Result<Option<Bytes>, Fail> {
    let drawn = probes(ctx, key, kind, 1, true).await?;
    Ok(drawn.and_then(|mut d| d.pop()).map(|(name, _)| name))
}

/// `draws` elements of the set or hash at `key` drawn by index probes, each a name and (a
/// hash's) value; `distinct`: no element twice. None when the probes keep finding elements
/// already drawn (ids far apart, a few elements): the caller reads the collection whole.
///
/// # Errors
/// The database's; an error reply for more than [`MOST_REPEATS`] draws.
pub async fn probes(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    kind: Kind,
    draws: usize,
    distinct: bool,
) -> Result<Option<Vec<(Bytes, Option<Bytes>)>>, Fail> {
    let Some((table, name, value)) = table(kind) else {
        return Ok(None);
    };
    if draws as u64 > MOST_REPEATS {
        return fail("ERR value is out of range");
    }
    // Two subqueries, not `MIN(id), MAX(id)` together: SQLite reads one end of an index
    // only for a lone MIN or MAX, and scans the key's rows for the pair.
    let bounds = ctx
        .one(
            stmt(format!(
                "SELECT (SELECT MIN(id) FROM {table} WHERE key = $1), \
                 (SELECT MAX(id) FROM {table} WHERE key = $1)"
            ))
            .bind(key),
        )
        .await?;
    let (Some(low), Some(high)) = (
        bounds.try_get::<Option<i64>>(0)?,
        bounds.try_get::<Option<i64>>(1)?,
    ) else {
        return Ok(Some(Vec::new()));
    };
    let sql = format!(
        "SELECT id, {name}, {value} FROM {table} WHERE key = $1 AND id >= $2 ORDER BY id LIMIT 1"
    );
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(draws);
    // Distinct draws of at most half the collection need about twice as many probes; far
    // more means the ids cluster.
    let mut left = draws.saturating_mul(8).saturating_add(16);
    while out.len() < draws {
        if left == 0 {
            return Ok(None);
        }
        left -= 1;
        let at = {
            use rand::Rng;
            rand::thread_rng().gen_range(low..=high)
        };
        let Some(row) = ctx.opt(stmt(&sql).bind(key).bind(at)).await? else {
            continue;
        };
        let id: i64 = row.try_get(0)?;
        if distinct && !seen.insert(id) {
            continue;
        }
        let found: Vec<u8> = row.try_get(1)?;
        let stored: Option<Vec<u8>> = row.try_get(2)?;
        out.push((Bytes::from(found), stored.map(Bytes::from)));
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_draw_probes_only_when_it_is_small_beside_the_collection() {
        let probes = |draws, distinct| DrawPlan::Probes { draws, distinct };
        for (len, count, want) in [
            (1000, 1, probes(1, true)),
            (1000, 10, probes(10, true)),
            (1000, 499, probes(499, true)),
            // Half the collection or more: read whole.
            (1000, 500, DrawPlan::Whole),
            (1000, 5000, DrawPlan::Whole),
            (0, 3, DrawPlan::Whole),
            (1000, 0, probes(0, true)),
            // Repeats: probes below the size, whole from there.
            (1000, -10, probes(10, false)),
            (1000, -999, probes(999, false)),
            (1000, -1000, DrawPlan::Whole),
            (3, -10, DrawPlan::Whole),
            (1000, i64::MIN, DrawPlan::Whole),
        ] {
            assert_eq!(plan(len, count), want, "{count} of {len}");
        }
    }

    #[test]
    fn whole_draws_follow_redis() {
        let all: Vec<u32> = (0..10).collect();
        assert_eq!(from_whole(all.clone(), 10).unwrap(), all, "all, in order");
        assert_eq!(from_whole(all.clone(), 99).unwrap(), all);
        let some = from_whole(all.clone(), 4).unwrap();
        let distinct: std::collections::HashSet<_> = some.iter().collect();
        assert_eq!((some.len(), distinct.len()), (4, 4));
        assert_eq!(from_whole(all.clone(), -25).unwrap().len(), 25);
        assert!(from_whole(Vec::<u32>::new(), -5).unwrap().is_empty());
        assert!(from_whole(all, -20_000_000).is_err());
    }
}
