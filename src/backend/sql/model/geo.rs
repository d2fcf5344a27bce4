//! The GEO commands on SQL backends, over sorted sets as Redis keeps them: a point is a
//! member whose score is its 52-bit geohash. The arithmetic (encoding, distances, the cells a
//! search scans, the order of its replies, the text of coordinates and distances) is
//! `geohash`, written to match Redis 7.0.15 bit for bit; this file parses the commands as
//! Redis does, in its order of checks, scans the sorted set and answers.

use super::args;
use super::geohash::{self, Shape, Sort};
use super::store::*;
use super::strings::arg;
use super::zsets;
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;

const UNIT: &str = "ERR unsupported unit provided. please use M, KM, FT, MI";

fn unit(text: &[u8]) -> Result<f64, Fail> {
    geohash::unit(text).map_or_else(|| fail(UNIT), Ok)
}

fn lon_lat(a: &[Bytes], at: usize) -> Result<(f64, f64), Fail> {
    let lon = args::float(arg(a, at))?;
    let lat = args::float(arg(a, at + 1))?;
    match geohash::check_lon_lat(lon, lat) {
        Ok(()) => Ok((lon, lat)),
        Err(text) => fail(text),
    }
}

fn number(text: &[u8], error: &str) -> Result<f64, Fail> {
    args::parse_f64(text).map_or_else(|| fail(error), Ok)
}

/// A coordinate: a double, spelt as Redis's human long double for these commands (the
/// command table's `human_doubles`).
fn coordinate(x: f64) -> Frame {
    double(x)
}

/// `GEOADD key [NX|XX] [CH] lon lat member ...`: `ZADD` with each point's geohash.
pub async fn geoadd(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let mut first = 2;
    let (mut nx, mut xx) = (false, false);
    while first < a.len() {
        match arg(a, first).to_ascii_uppercase().as_slice() {
            b"NX" => nx = true,
            b"XX" => xx = true,
            b"CH" => {}
            _ => break,
        }
        first += 1;
    }
    if !(a.len() - first).is_multiple_of(3) || (nx && xx) {
        return fail(SYNTAX);
    }
    let mut zadd: Vec<Bytes> = vec![Bytes::from_static(b"ZADD")];
    zadd.extend(a[1..first].iter().cloned());
    for point in a[first..].chunks(3) {
        let (lon, lat) = lon_lat(point, 0)?;
        let score = match geohash::encode(lon, lat) {
            Ok(score) => score,
            Err(text) => return fail(text),
        };
        zadd.push(Bytes::from((score as u64).to_string()));
        zadd.push(point[2].clone());
    }
    zsets::zadd(ctx, &zadd).await
}

/// `GEOPOS key member ...`.
pub async fn geopos(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let exists = zsets::zset(ctx, key).await?;
    let mut out = Vec::with_capacity(a.len().saturating_sub(2));
    for member in a.iter().skip(2) {
        let score = if exists {
            zsets::score(ctx, key, member).await?
        } else {
            None
        };
        out.push(match score {
            Some(score) => {
                let (lon, lat) = geohash::decode(score);
                array(vec![coordinate(lon), coordinate(lat)])
            }
            // `*-1` in RESP2 (the command table's nested nil array).
            None => Frame::Null,
        });
    }
    Ok(array(out))
}

/// `GEOHASH key member ...`.
pub async fn geohash_cmd(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let exists = zsets::zset(ctx, key).await?;
    let mut out = Vec::with_capacity(a.len().saturating_sub(2));
    for member in a.iter().skip(2) {
        let score = if exists {
            zsets::score(ctx, key, member).await?
        } else {
            None
        };
        out.push(score.map_or(Frame::Null, |s| bulk(Bytes::from(geohash::hash_string(s)))));
    }
    Ok(array(out))
}

/// `GEODIST key member1 member2 [unit]`.
pub async fn geodist(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let conversion = match a.len() {
        5 => unit(arg(a, 4))?,
        n if n > 5 => return fail(SYNTAX),
        _ => 1.0,
    };
    let key = arg(a, 1);
    if !zsets::zset(ctx, key).await? {
        return Ok(Frame::Null);
    }
    let one = zsets::score(ctx, key, arg(a, 2)).await?;
    let two = zsets::score(ctx, key, arg(a, 3)).await?;
    let (Some(one), Some(two)) = (one, two) else {
        return Ok(Frame::Null);
    };
    let (lon1, lat1) = geohash::decode(one);
    let (lon2, lat2) = geohash::decode(two);
    let metres = geohash::distance(lon1, lat1, lon2, lat2);
    Ok(bulk(Bytes::from(geohash::format_distance(
        metres, conversion,
    ))))
}

/// Which search command, as `georadiusGeneric`'s flags say.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Search {
    Radius,
    RadiusRo,
    ByMember,
    ByMemberRo,
    /// `GEOSEARCH`.
    Plain,
    /// `GEOSEARCHSTORE`.
    Store,
}

/// A search's options, parsed.
#[derive(Default)]
struct SearchOptions {
    withdist: bool,
    withhash: bool,
    withcoord: bool,
    any: bool,
    sort: Option<Sort>,
    count: i64,
    store: Option<Bytes>,
    storedist: bool,
    centre: Option<(f64, f64)>,
    from_member: bool,
    shape: Option<(Shape, f64)>,
}

/// The point a member stands at, or Redis's error when it has none.
async fn member_point(ctx: &mut Ctx<'_>, key: &[u8], member: &[u8]) -> Result<(f64, f64), Fail> {
    match zsets::score(ctx, key, member).await? {
        Some(score) => Ok(geohash::decode(score)),
        None => fail("ERR could not decode requested zset member"),
    }
}

fn radius(a: &[Bytes], at: usize) -> Result<(Shape, f64), Fail> {
    let r = number(arg(a, at), "ERR need numeric radius")?;
    if r < 0.0 {
        return fail("ERR radius cannot be negative");
    }
    Ok((Shape::Radius(r), unit(arg(a, at + 1))?))
}

fn rectangle(a: &[Bytes], at: usize) -> Result<(Shape, f64), Fail> {
    let width = number(arg(a, at), "ERR need numeric width")?;
    let height = number(arg(a, at + 1), "ERR need numeric height")?;
    if width < 0.0 || height < 0.0 {
        return fail("ERR height or width cannot be negative");
    }
    Ok((Shape::Box { width, height }, unit(arg(a, at + 2))?))
}

/// The optional arguments from `base`, in Redis's order of checks.
async fn options(
    ctx: &mut Ctx<'_>,
    a: &[Bytes],
    base: usize,
    how: Search,
    exists: bool,
    key: &[u8],
) -> Result<SearchOptions, Fail> {
    let search = matches!(how, Search::Plain | Search::Store);
    let no_store = matches!(how, Search::RadiusRo | Search::ByMemberRo);
    let mut o = SearchOptions::default();
    let rest = a.len().saturating_sub(base);
    let mut i = 0;
    while i < rest {
        let more = rest - i - 1;
        let at = base + i;
        match arg(a, at).to_ascii_uppercase().as_slice() {
            b"WITHDIST" => o.withdist = true,
            b"WITHHASH" => o.withhash = true,
            b"WITHCOORD" => o.withcoord = true,
            b"ANY" => o.any = true,
            b"ASC" => o.sort = Some(Sort::Asc),
            b"DESC" => o.sort = Some(Sort::Desc),
            b"COUNT" if more >= 1 => {
                o.count = args::int(arg(a, at + 1))?;
                if o.count <= 0 {
                    return fail("ERR COUNT must be > 0");
                }
                i += 1;
            }
            b"STORE" | b"STOREDIST" if more >= 1 && !no_store && !search => {
                o.storedist = arg(a, at).eq_ignore_ascii_case(b"STOREDIST");
                o.store = Some(a[at + 1].clone());
                i += 1;
            }
            b"STOREDIST" if how == Search::Store => o.storedist = true,
            b"FROMMEMBER" if more >= 1 && search && o.centre.is_none() && !o.from_member => {
                if exists {
                    o.centre = Some(member_point(ctx, key, arg(a, at + 1)).await?);
                }
                o.from_member = true;
                i += 1;
            }
            b"FROMLONLAT" if more >= 2 && search && !o.from_member => {
                o.centre = Some(lon_lat(a, at + 1)?);
                i += 2;
            }
            b"BYRADIUS"
                if more >= 2 && search && !matches!(o.shape, Some((Shape::Box { .. }, _))) =>
            {
                o.shape = Some(radius(a, at + 1)?);
                i += 2;
            }
            b"BYBOX" if more >= 3 && search && !matches!(o.shape, Some((Shape::Radius(_), _))) => {
                o.shape = Some(rectangle(a, at + 1)?);
                i += 3;
            }
            _ => return fail(SYNTAX),
        }
        i += 1;
    }
    Ok(o)
}

/// `GEORADIUS`, `GEORADIUSBYMEMBER` (and `_RO`), `GEOSEARCH`, `GEOSEARCHSTORE`.
pub async fn search(ctx: &mut Ctx<'_>, a: &[Bytes], how: Search) -> Out {
    let store_cmd = how == Search::Store;
    let key = arg(a, if store_cmd { 2 } else { 1 });
    if store_cmd || matches!(how, Search::Radius | Search::ByMember) {
        let mut locks: Vec<&[u8]> = vec![key];
        locks.extend(a.iter().map(|x| x.as_ref()));
        ctx.lock(&locks).await?;
    }
    let exists = zsets::zset(ctx, key).await?;
    let mut fixed: Option<((f64, f64), (Shape, f64))> = None;
    let base = match how {
        Search::Radius | Search::RadiusRo => {
            let centre = lon_lat(a, 2)?;
            fixed = Some((centre, radius(a, 4)?));
            6
        }
        Search::ByMember | Search::ByMemberRo if !exists => 5,
        Search::ByMember | Search::ByMemberRo => {
            let centre = member_point(ctx, key, arg(a, 2)).await?;
            fixed = Some((centre, radius(a, 3)?));
            5
        }
        Search::Plain => 2,
        Search::Store => 3,
    };
    let mut o = options(ctx, a, base, how, exists, key).await?;
    if store_cmd {
        o.store = Some(a[1].clone());
    }
    if o.store.is_some() && (o.withdist || o.withhash || o.withcoord) {
        return fail(format!(
            "ERR {} is not compatible with WITHDIST, WITHHASH and WITHCOORD options",
            if store_cmd {
                "GEOSEARCHSTORE"
            } else {
                "STORE option in GEORADIUS"
            }
        ));
    }
    let name = String::from_utf8_lossy(arg(a, 0)).into_owned();
    let search = matches!(how, Search::Plain | Search::Store);
    if search && o.centre.is_none() && !o.from_member {
        return fail(format!(
            "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}"
        ));
    }
    if search && o.shape.is_none() {
        return fail(format!(
            "ERR exactly one of BYRADIUS and BYBOX can be specified for {name}"
        ));
    }
    if o.any && o.count == 0 {
        return fail("ERR the ANY argument requires COUNT argument");
    }
    if !exists {
        return match o.store {
            Some(dest) => {
                ctx.delete(&dest).await?;
                Ok(int(0))
            }
            None => Ok(array(Vec::new())),
        };
    }
    let (centre, (shape, conversion)) = match fixed {
        Some(f) => f,
        None => match (o.centre, o.shape) {
            (Some(c), Some(s)) => (c, s),
            _ => return Ok(array(Vec::new())),
        },
    };
    answer(ctx, key, &o, centre, shape, conversion).await
}

/// Scans the cells around `centre`, keeps the points within `shape`, orders them as Redis
/// does and answers (or stores).
async fn answer(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    o: &SearchOptions,
    (lon, lat): (f64, f64),
    shape: Shape,
    conversion: f64,
) -> Out {
    let any_limit = if o.any { o.count as u64 } else { 0 };
    let mut found: Vec<geohash::Match<Bytes>> = Vec::new();
    'ranges: for (min, max) in geohash::search_ranges_in_unit(lon, lat, &shape, conversion) {
        if any_limit != 0 && found.len() as u64 >= any_limit {
            break;
        }
        let rows = ctx.all(stmt(
            "SELECT member, score FROM hf_zset WHERE key = $1 AND score >= $2 AND score < $3 \
             ORDER BY score, member",
        )
        .bind(key)
        .bind(min)
        .bind(max))
        .await?;
        for row in rows {
            let member: Vec<u8> = row.try_get(0)?;
            let score: f64 = row.try_get(1)?;
            if let Some(dist) = geohash::within_in_unit(lon, lat, &shape, conversion, score) {
                let (plon, plat) = geohash::decode(score);
                found.push(geohash::Match {
                    member: Bytes::from(member),
                    score,
                    dist,
                    lon: plon,
                    lat: plat,
                });
            }
            if any_limit != 0 && found.len() as u64 >= any_limit {
                break 'ranges;
            }
        }
    }
    if found.is_empty() && o.store.is_none() {
        return Ok(array(Vec::new()));
    }
    // COUNT without ANY and without an order means the nearest: ascending.
    let sort = match o.sort {
        Some(sort) => sort,
        None if o.count != 0 && !o.any => Sort::Asc,
        None => Sort::Unsorted,
    };
    let count = u64::try_from(o.count).unwrap_or(0);
    let returned = geohash::arrange(&mut found, |m| m.dist, sort, count);
    found.truncate(returned);
    if let Some(dest) = &o.store {
        let pairs: Vec<(Bytes, f64)> = found
            .iter()
            .map(|m| {
                let score = if o.storedist {
                    m.dist / conversion
                } else {
                    m.score
                };
                (m.member.clone(), score)
            })
            .collect();
        zsets::replace_with(ctx, dest, &pairs).await?;
        return Ok(int(pairs.len() as i64));
    }
    let items = found
        .iter()
        .map(|m| {
            if !(o.withdist || o.withhash || o.withcoord) {
                return bulk(m.member.clone());
            }
            let mut parts = vec![bulk(m.member.clone())];
            if o.withdist {
                parts.push(bulk(Bytes::from(geohash::format_distance(
                    m.dist, conversion,
                ))));
            }
            if o.withhash {
                parts.push(int(geohash::score_to_integer(m.score)));
            }
            if o.withcoord {
                parts.push(array(vec![coordinate(m.lon), coordinate(m.lat)]));
            }
            array(parts)
        })
        .collect();
    Ok(array(items))
}
