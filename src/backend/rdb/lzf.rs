//! LZF, the compression Redis applies to a string of more than 20 bytes in a payload when it
//! saves at least 4 bytes: compressed here as Redis's `lzf_compress` compresses (a hash of
//! the next three bytes into a table of 65,536 offsets, the same run and back-reference
//! choices), so a payload holdfast writes is Redis's byte for byte. Redis leaves the table
//! uninitialised; holdfast zeroes it, which only ever finds fewer stale matches.

const HSIZE: usize = 1 << 16;
const MAX_LIT: usize = 1 << 5;
const MAX_OFF: usize = 1 << 13;
const MAX_REF: usize = (1 << 8) + (1 << 3);

fn first(input: &[u8], ip: usize) -> u32 {
    (u32::from(input[ip]) << 8) | u32::from(input.get(ip + 1).copied().unwrap_or(0))
}

fn next(h: u32, input: &[u8], ip: usize) -> u32 {
    (h << 8) | u32::from(input[ip + 2])
}

fn idx(h: u32) -> usize {
    ((h >> 8).wrapping_sub(h.wrapping_mul(5)) as usize) & (HSIZE - 1)
}

/// Copies one byte into the literal run under way, closing the run at its longest (32);
/// None when the output is full.
fn literal(out: &mut [u8], op: &mut usize, lit: &mut usize, byte: u8) -> Option<()> {
    *out.get_mut(*op)? = byte;
    *op += 1;
    *lit += 1;
    if *lit == MAX_LIT {
        out[*op - *lit - 1] = (*lit - 1) as u8;
        *lit = 0;
        *op += 1;
    }
    Some(())
}

/// `input` compressed into at most `out_len` bytes; None when it does not fit.
pub fn compress(input: &[u8], out_len: usize) -> Option<Vec<u8>> {
    let in_len = input.len();
    if in_len == 0 || out_len == 0 {
        return None;
    }
    let mut htab = vec![0u32; HSIZE];
    let mut out = vec![0u8; out_len];
    let mut ip = 0usize;
    let mut op = 1usize; // the first run's length byte
    let mut lit = 0usize;
    let mut hval = first(input, ip);
    while ip + 2 < in_len {
        hval = next(hval, input, ip);
        let slot = idx(hval);
        let reference = htab[slot] as usize;
        htab[slot] = ip as u32;
        let found = reference > 0
            && ip - reference - 1 < MAX_OFF
            && input[reference + 2] == input[ip + 2]
            && input[reference] == input[ip]
            && input[reference + 1] == input[ip + 1];
        if found {
            let off = ip - reference - 1;
            let mut len = 2usize;
            let maxlen = (in_len - ip - len).min(MAX_REF);
            if op + 3 + 1 >= out_len && op - usize::from(lit == 0) + 3 + 1 >= out_len {
                return None;
            }
            out[op - lit - 1] = (lit as u8).wrapping_sub(1); // stop the run
            op -= usize::from(lit == 0); // undo a run of length zero
                                         // Redis compares 16 positions unchecked against maxlen when more than 16
                                         // remain, then one at a time up to maxlen.
            'matching: {
                if maxlen > 16 {
                    for _ in 0..16 {
                        len += 1;
                        if input[reference + len] != input[ip + len] {
                            break 'matching;
                        }
                    }
                }
                loop {
                    len += 1;
                    if !(len < maxlen && input[reference + len] == input[ip + len]) {
                        break;
                    }
                }
            }
            len -= 2; // octets - 1
            ip += 1;
            if len < 7 {
                out[op] = ((off >> 8) + (len << 5)) as u8;
                op += 1;
            } else {
                out[op] = ((off >> 8) + (7 << 5)) as u8;
                out[op + 1] = (len - 7) as u8;
                op += 2;
            }
            out[op] = off as u8;
            op += 2; // and start a run
            lit = 0;
            ip += len + 1;
            if ip + 2 >= in_len {
                break;
            }
            // Hash the two positions before the next, as Redis's VERY_FAST setting does.
            ip -= 2;
            hval = first(input, ip);
            hval = next(hval, input, ip);
            htab[idx(hval)] = ip as u32;
            ip += 1;
            hval = next(hval, input, ip);
            htab[idx(hval)] = ip as u32;
            ip += 1;
        } else {
            literal(&mut out, &mut op, &mut lit, input[ip])?;
            ip += 1;
        }
    }
    if op + 3 > out_len {
        return None;
    }
    while ip < in_len {
        literal(&mut out, &mut op, &mut lit, input[ip])?;
        ip += 1;
    }
    out[op - lit - 1] = (lit as u8).wrapping_sub(1);
    op -= usize::from(lit == 0);
    out.truncate(op);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::compress;
    use crate::backend::rdb::lzf_decompress;

    #[test]
    fn what_it_compresses_decompresses_to_itself() {
        let cases: Vec<Vec<u8>> = vec![
            b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".to_vec(),
            b"abcabcabcabcabcabcabcabcabcabcabcabcabcabcabc".to_vec(),
            (0..5000u32).map(|i| (i % 251) as u8).collect(),
            (0..3000u32).map(|i| (i * 7 % 13) as u8).collect(),
            b"hello world, hello world, hello world!".to_vec(),
        ];
        for input in cases {
            let out = compress(&input, input.len() - 4).expect("compressible");
            assert!(out.len() < input.len() - 4);
            assert_eq!(lzf_decompress(&out, input.len()), Some(input));
        }
    }

    #[test]
    fn what_does_not_shrink_is_not_compressed() {
        let input: Vec<u8> = (0..40u8).collect();
        assert_eq!(compress(&input, input.len() - 4), None);
    }

    #[test]
    fn redis_s_bytes_for_a_run() {
        // DUMP of SET k (50 × 'a') on Redis 7.0: the LZF part of the payload.
        let input = vec![b'a'; 50];
        assert_eq!(
            compress(&input, 46),
            Some(vec![0x01, b'a', b'a', 0xE0, 0x25, 0x00, 0x01, b'a', b'a'])
        );
    }
}
