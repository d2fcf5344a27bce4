//! Geohash cells: bit interleaving, encoding a point into a cell, decoding a
//! cell back into its bounds, and stepping to neighbouring cells.
//!
//! Longitude bits sit in the odd positions and latitude bits in the even
//! positions of the interleaved value, as in Redis.

use super::cast::{c_double_to_u32, c_double_to_u64};

/// Redis refuses latitudes beyond the Web-Mercator limit.
pub const LAT_MIN: f64 = -85.05112878;
pub const LAT_MAX: f64 = 85.05112878;
pub const LON_MIN: f64 = -180.0;
pub const LON_MAX: f64 = 180.0;
/// 26 steps per axis give the 52-bit scores stored in the sorted set.
pub const STEP_MAX: u8 = 26;

/// A closed interval of degrees.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Span {
    pub min: f64,
    pub max: f64,
}

/// The coordinate ranges of Redis's internal grid.
pub const LON_SPAN: Span = Span {
    min: LON_MIN,
    max: LON_MAX,
};
pub const LAT_SPAN: Span = Span {
    min: LAT_MIN,
    max: LAT_MAX,
};
/// The ranges of a standard geohash (used only for GEOHASH's text).
pub const STD_LAT_SPAN: Span = Span {
    min: -90.0,
    max: 90.0,
};

/// A cell: `step` bits per axis, interleaved into the low `2 * step` bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cell {
    pub bits: u64,
    pub step: u8,
}

impl Cell {
    /// The "no cell" marker Redis uses for neighbours it discards.
    pub const NONE: Cell = Cell { bits: 0, step: 0 };

    pub fn is_none(self) -> bool {
        self.bits == 0 && self.step == 0
    }

    /// The cell's prefix shifted up to a 52-bit score.
    pub fn aligned(self) -> u64 {
        // Cells here have 1..=26 steps; saturating keeps odd input panic-free.
        self.bits << 52u32.saturating_sub(2 * u32::from(self.step))
    }
}

/// The bounds of a cell.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bounds {
    pub lon: Span,
    pub lat: Span,
}

/// Spread the 32 bits of `v` into the even bit positions of a u64.
fn spread(v: u32) -> u64 {
    let mut x = u64::from(v);
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

/// Gather the even bit positions of `v` into a u32 (inverse of `spread`).
fn gather(v: u64) -> u32 {
    let mut x = v & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x >> 16)) & 0x0000_0000_FFFF_FFFF;
    // Only the low 32 bits can be set after the last mask.
    x as u32
}

/// Latitude bits in even positions, longitude bits in odd positions.
fn interleave(lat: u32, lon: u32) -> u64 {
    spread(lat) | (spread(lon) << 1)
}

/// Split an interleaved value back into (latitude bits, longitude bits).
fn deinterleave(bits: u64) -> (u32, u32) {
    (gather(bits), gather(bits >> 1))
}

/// Whether (lon, lat) lies inside Redis's accepted coordinate limits.
pub fn in_limits(lon: f64, lat: f64) -> bool {
    !(lon > LON_MAX || lon < LON_MIN || lat > LAT_MAX || lat < LAT_MIN)
}

/// geohashEncode: the cell of `step` bits per axis holding (lon, lat) in the
/// given ranges, or None where Redis's encoder reports failure.
pub fn encode_in(lon_span: Span, lat_span: Span, lon: f64, lat: f64, step: u8) -> Option<Cell> {
    if step == 0 || step > 32 || !in_limits(lon, lat) {
        return None;
    }
    if lat < lat_span.min || lat > lat_span.max || lon < lon_span.min || lon > lon_span.max {
        return None;
    }
    let scale = (1u64 << step) as f64;
    let lat_off = (lat - lat_span.min) / (lat_span.max - lat_span.min) * scale;
    let lon_off = (lon - lon_span.min) / (lon_span.max - lon_span.min) * scale;
    let bits = interleave(c_double_to_u32(lat_off), c_double_to_u32(lon_off));
    Some(Cell { bits, step })
}

/// Encode into Redis's internal grid.
pub fn encode(lon: f64, lat: f64, step: u8) -> Option<Cell> {
    encode_in(LON_SPAN, LAT_SPAN, lon, lat, step)
}

/// geohashDecode on the internal grid: the bounds of a cell.
pub fn bounds(cell: Cell) -> Bounds {
    let (ilat, ilon) = deinterleave(cell.bits);
    // The step is at most 32 for any cell handed in here (26 in practice).
    let div = (1u64 << cell.step.min(63)) as f64;
    let lat_scale = LAT_SPAN.max - LAT_SPAN.min;
    let lon_scale = LON_SPAN.max - LON_SPAN.min;
    // `+ 1` wraps in 32 bits, as the C unsigned arithmetic does.
    let lat_next = ilat.wrapping_add(1);
    let lon_next = ilon.wrapping_add(1);
    Bounds {
        lat: Span {
            min: LAT_SPAN.min + (f64::from(ilat) / div) * lat_scale,
            max: LAT_SPAN.min + (f64::from(lat_next) / div) * lat_scale,
        },
        lon: Span {
            min: LON_SPAN.min + (f64::from(ilon) / div) * lon_scale,
            max: LON_SPAN.min + (f64::from(lon_next) / div) * lon_scale,
        },
    }
}

/// The centre of a cell, clamped to the accepted limits.
pub fn centre(b: &Bounds) -> (f64, f64) {
    let mut lon = (b.lon.min + b.lon.max) / 2.0;
    lon = lon.clamp_c(LON_MIN, LON_MAX);
    let mut lat = (b.lat.min + b.lat.max) / 2.0;
    lat = lat.clamp_c(LAT_MIN, LAT_MAX);
    (lon, lat)
}

/// Clamping with C's comparison semantics (a NaN passes through unchanged).
trait ClampC {
    fn clamp_c(self, lo: f64, hi: f64) -> f64;
}

impl ClampC for f64 {
    fn clamp_c(self, lo: f64, hi: f64) -> f64 {
        if self > hi {
            hi
        } else if self < lo {
            lo
        } else {
            self
        }
    }
}

/// decodeGeohash: a sorted-set score read back as a 26-step cell centre.
pub fn decode_score(score: f64) -> (f64, f64) {
    let cell = Cell {
        bits: c_double_to_u64(score),
        step: STEP_MAX,
    };
    centre(&bounds(cell))
}

/// Move a cell one column east (`east == true`) or west, wrapping round.
fn move_lon(cell: Cell, east: bool) -> Cell {
    let lon_bits = cell.bits & 0xAAAA_AAAA_AAAA_AAAA;
    let lat_bits = cell.bits & 0x5555_5555_5555_5555;
    let width = 64u32.saturating_sub(2 * u32::from(cell.step));
    // Filling the lat positions lets a carry/borrow ripple through them.
    let fill = 0x5555_5555_5555_5555u64.checked_shr(width).unwrap_or(0);
    let moved = if east {
        lon_bits.wrapping_add(fill + 1)
    } else {
        (lon_bits | fill).wrapping_sub(fill + 1)
    };
    let moved = moved & 0xAAAA_AAAA_AAAA_AAAAu64.checked_shr(width).unwrap_or(0);
    Cell {
        bits: moved | lat_bits,
        step: cell.step,
    }
}

/// Move a cell one row north (`north == true`) or south, wrapping round.
fn move_lat(cell: Cell, north: bool) -> Cell {
    let lon_bits = cell.bits & 0xAAAA_AAAA_AAAA_AAAA;
    let lat_bits = cell.bits & 0x5555_5555_5555_5555;
    let width = 64u32.saturating_sub(2 * u32::from(cell.step));
    let fill = 0xAAAA_AAAA_AAAA_AAAAu64.checked_shr(width).unwrap_or(0);
    let moved = if north {
        lat_bits.wrapping_add(fill + 1)
    } else {
        (lat_bits | fill).wrapping_sub(fill + 1)
    };
    let moved = moved & 0x5555_5555_5555_5555u64.checked_shr(width).unwrap_or(0);
    Cell {
        bits: lon_bits | moved,
        step: cell.step,
    }
}

/// The eight neighbours of a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Neighbours {
    pub north: Cell,
    pub south: Cell,
    pub east: Cell,
    pub west: Cell,
    pub north_east: Cell,
    pub north_west: Cell,
    pub south_east: Cell,
    pub south_west: Cell,
}

/// geohashNeighbors. Requires 1 <= step <= 32.
pub fn neighbours(cell: Cell) -> Neighbours {
    Neighbours {
        north: move_lat(cell, true),
        south: move_lat(cell, false),
        east: move_lon(cell, true),
        west: move_lon(cell, false),
        north_east: move_lat(move_lon(cell, true), true),
        north_west: move_lat(move_lon(cell, false), true),
        south_east: move_lat(move_lon(cell, true), false),
        south_west: move_lat(move_lon(cell, false), false),
    }
}
