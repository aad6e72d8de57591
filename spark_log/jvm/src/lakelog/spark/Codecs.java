package lakelog.spark;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.Arrays;
import java.util.zip.GZIPInputStream;

/**
 * Kafka's batch codecs on read (attribute bits 0-2): 1 gzip (one RFC 1952 member, java.util.zip),
 * 2 snappy (xerial framing: magic 82 'SNAPPY' 00, i32 version, i32 compatible, then blocks of i32
 * big-endian length + raw snappy block; raw snappy also accepted, as logstore/compression.py
 * does; snappy-java), 3 lz4 (one LZ4 frame; lz4-java), 4 zstd (whole zstd frames; zstd-jni). The
 * three libraries ship in pyspark's jars. Inflation is bounded: past {@code maxBytes} it fails
 * instead of allocating. Every failure is an IOException with the reason; the caller names the
 * object and position.
 */
final class Codecs {
    static final byte[] XERIAL_MAGIC = {(byte) 0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};

    private Codecs() {}

    /** The codec's name, for messages. */
    static String name(int codec) {
        switch (codec) {
            case 1: return "gzip";
            case 2: return "snappy";
            case 3: return "lz4";
            case 4: return "zstd";
            default: return "codec " + codec;
        }
    }

    /** Inflated bytes of data[off, off+len) as a fresh array holding exactly them. */
    static byte[] decompress(int codec, byte[] data, int off, int len, int maxBytes) throws IOException {
        try {
            switch (codec) {
                case 1:
                    return readBounded(new GZIPInputStream(new ByteArrayInputStream(data, off, len), 64 * 1024),
                                       maxBytes, "gzip");
                case 2:
                    return snappy(data, off, len, maxBytes);
                case 3:
                    return readBounded(new net.jpountz.lz4.LZ4FrameInputStream(new ByteArrayInputStream(data, off, len)),
                                       maxBytes, "lz4");
                case 4:
                    return zstd(data, off, len, maxBytes);
                default:
                    throw new IOException("unknown compression codec id " + codec);
            }
        } catch (IOException e) {
            throw e;
        } catch (RuntimeException | LinkageError e) {  // the libraries throw unchecked errors on junk
            throw new IOException("cannot decompress " + name(codec) + " payload: " + e, e);
        }
    }

    private static byte[] readBounded(InputStream in, int maxBytes, String what) throws IOException {
        try (InputStream s = in) {
            byte[] out = new byte[Math.min(Math.max(1024, maxBytes / 64), maxBytes + 1)];
            int n = 0;
            while (true) {
                if (n == out.length) {
                    if (out.length > maxBytes) {
                        throw new IOException("decompressed records exceed the limit of " + maxBytes + " bytes");
                    }
                    out = Arrays.copyOf(out, (int) Math.min((long) out.length * 2, (long) maxBytes + 1));
                }
                int r = s.read(out, n, out.length - n);
                if (r < 0) {
                    break;
                }
                n += r;
            }
            if (n > maxBytes) {
                throw new IOException("decompressed records exceed the limit of " + maxBytes + " bytes");
            }
            return n == out.length ? out : Arrays.copyOf(out, n);
        } catch (java.io.EOFException e) {
            throw new IOException(what + " payload is truncated", e);
        }
    }

    private static byte[] snappy(byte[] data, int off, int len, int maxBytes) throws IOException {
        if (len < 8 || !Arrays.equals(data, off, off + 8, XERIAL_MAGIC, 0, 8)) {
            return snappyRaw(data, off, len, maxBytes, 0);
        }
        if (len < 16) {
            throw new IOException("xerial snappy header is truncated");
        }
        int pos = off + 16;
        int end = off + len;
        byte[] out = new byte[0];
        int n = 0;
        while (pos < end) {
            if (pos + 4 > end) {
                throw new IOException("xerial snappy block length is truncated");
            }
            int blockLen = be32(data, pos);
            pos += 4;
            if (blockLen < 0 || blockLen > end - pos) {
                throw new IOException("xerial snappy block is truncated");
            }
            byte[] block = snappyRaw(data, pos, blockLen, maxBytes, n);
            if (out.length < n + block.length) {
                out = Arrays.copyOf(out, Math.max(n + block.length, Math.min(maxBytes, out.length * 2)));
            }
            System.arraycopy(block, 0, out, n, block.length);
            n += block.length;
            pos += blockLen;
        }
        return n == out.length ? out : Arrays.copyOf(out, n);
    }

    private static byte[] snappyRaw(byte[] data, int off, int len, int maxBytes, int already) throws IOException {
        long declared = rawLength(data, off, len);
        if (declared + already > maxBytes) {
            throw new IOException("decompressed records exceed the limit of " + maxBytes + " bytes");
        }
        byte[] out = new byte[(int) declared];
        int n = org.xerial.snappy.Snappy.rawUncompress(data, off, len, out, 0);
        if (n != declared) {
            throw new IOException("snappy block inflates to " + n + " bytes, it declares " + declared);
        }
        return out;
    }

    private static long rawLength(byte[] data, int off, int len) throws IOException {
        long result = 0;
        int shift = 0;
        for (int i = 0; i < 5; i++) {
            if (i >= len) {
                throw new IOException("snappy block length is truncated");
            }
            int b = data[off + i] & 0xFF;
            result |= (long) (b & 0x7F) << shift;
            if ((b & 0x80) == 0) {
                return result;
            }
            shift += 7;
        }
        throw new IOException("snappy block length varint is too long");
    }

    private static byte[] zstd(byte[] data, int off, int len, int maxBytes) throws IOException {
        // A frame may lack its content size (Kafka's Java producer streams): inflate by stream,
        // bounded, and require that the input ends with a whole frame.
        com.github.luben.zstd.ZstdInputStreamNoFinalizer in =
            new com.github.luben.zstd.ZstdInputStreamNoFinalizer(new ByteArrayInputStream(data, off, len));
        in.setContinuous(false);
        byte[] out = readBounded(in, maxBytes, "zstd");
        // Whole frames: walk the frame sizes (findFrameCompressedSize fails on a cut frame).
        int pos = off;
        int end = off + len;
        while (pos < end) {
            long size = com.github.luben.zstd.Zstd.findFrameCompressedSize(data, pos, end - pos);
            if (com.github.luben.zstd.Zstd.isError(size) || size <= 0 || size > end - pos) {
                throw new IOException("zstd frame is truncated");
            }
            pos += (int) size;
        }
        return out;
    }

    static int be32(byte[] b, int p) {
        return (b[p] & 0xFF) << 24 | (b[p + 1] & 0xFF) << 16 | (b[p + 2] & 0xFF) << 8 | (b[p + 3] & 0xFF);
    }
}
