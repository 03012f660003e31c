// A javakdb client for the kdb+ IPC tests (tests/test_ipc_java.py). javakdb
// writes big-endian messages, so everything here also checks that tickdb
// reads that byte order.
//
//   java -cp javakdb.jar:. KdbJava upd PORT ROWS SEED   async .u.upd of ROWS trades, then the chaser
//   java -cp javakdb.jar:. KdbJava query PORT TEXT      one sync query; prints the result, a cell per line
//   java -cp javakdb.jar:. KdbJava inflate FILE         decodes a (compressed) message from FILE
//   java -cp javakdb.jar:. KdbJava zipped PORT ROWS     sends one compressed sync .u.upd of ROWS trades

import com.kx.c;
import java.io.DataInputStream;
import java.io.OutputStream;
import java.lang.reflect.Array;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Instant;
import java.util.Random;

public class KdbJava {
    static final String CREDS = "tickdb:tickdb";

    static Object[] trades(int rows, long seed, Instant t0) {
        Random r = new Random(seed);
        Instant[] time = new Instant[rows];
        String[] sym = new String[rows];
        double[] price = new double[rows];
        long[] size = new long[rows];
        for (int i = 0; i < rows; i++) {
            time[i] = t0.plusNanos(i * 1000L);
            sym[i] = "J" + (i % 7);
            price[i] = Math.round(r.nextDouble() * 100000) / 100.0;
            size[i] = 1 + r.nextInt(1000);
        }
        return new Object[] {time, sym, price, size};
    }

    static void print(Object x) {
        if (x instanceof c.Flip) {
            c.Flip f = (c.Flip) x;
            for (int j = 0; j < f.x.length; j++) {
                System.out.println("col " + f.x[j]);
                int n = Array.getLength(f.y[j]);
                for (int i = 0; i < n; i++) System.out.println(cell(Array.get(f.y[j], i)));
            }
        } else if (x instanceof c.Dict) {
            c.Dict d = (c.Dict) x;
            System.out.println("keyed");
            print(d.x);
            print(d.y);
        } else {
            System.out.println("atom " + cell(x));
        }
    }

    static String cell(Object v) {
        if (v instanceof Instant) {
            Instant t = (Instant) v;
            return Long.toString(t.getEpochSecond() * 1_000_000_000L + t.getNano());
        }
        if (v instanceof char[]) return new String((char[]) v);
        return String.valueOf(v);
    }

    public static void main(String[] a) throws Exception {
        switch (a[0]) {
            case "upd": {
                c conn = new c("127.0.0.1", Integer.parseInt(a[1]), CREDS);
                int rows = Integer.parseInt(a[2]);
                Object[] cols = trades(rows, Long.parseLong(a[3]), Instant.parse("2024-01-02T09:30:00Z"));
                // In batches of 100 rows, async, as a feed handler does.
                for (int off = 0; off < rows; off += 100) {
                    int n = Math.min(100, rows - off);
                    Object[] part = new Object[4];
                    for (int j = 0; j < 4; j++) {
                        Object col = Array.newInstance(cols[j].getClass().getComponentType(), n);
                        System.arraycopy(cols[j], off, col, 0, n);
                        part[j] = col;
                    }
                    conn.ks(".u.upd", "trade", part);
                }
                Object chased = conn.k("");
                System.out.println("chaser " + (chased == null ? "null" : chased.getClass().getSimpleName()));
                conn.close();
                break;
            }
            case "query": {
                c conn = new c("127.0.0.1", Integer.parseInt(a[1]), CREDS);
                try {
                    print(conn.k(a[2]));
                } catch (c.KException e) {
                    System.out.println("error " + e.getMessage());
                }
                conn.close();
                break;
            }
            case "inflate": {
                byte[] msg = Files.readAllBytes(Paths.get(a[1]));
                print(new c().deserialize(msg));
                break;
            }
            case "zipped": {
                int rows = Integer.parseInt(a[2]);
                Object[] cols = trades(rows, 7, Instant.parse("2024-01-03T09:30:00Z"));
                // Repetitive prices and sizes, as ticks often are: random
                // doubles would not halve, and javakdb would not compress.
                double[] price = (double[]) cols[2];
                long[] size = (long[]) cols[3];
                for (int i = 0; i < rows; i++) {
                    price[i] = 100 + (i % 10);
                    size[i] = 100;
                }
                Object[] call = new Object[] {".u.upd".toCharArray(), "trade", cols};
                byte[] msg = new c().serialize(1, call, true);
                if (msg[2] != 1) throw new RuntimeException("javakdb did not compress the message");
                System.out.println("compressed " + msg.length);
                // Raw socket: javakdb compresses nothing it sends on loopback.
                java.net.Socket s = new java.net.Socket("127.0.0.1", Integer.parseInt(a[1]));
                OutputStream o = s.getOutputStream();
                o.write((CREDS + "\u0003\u0000").getBytes("ASCII"));
                DataInputStream in = new DataInputStream(s.getInputStream());
                in.readByte();
                o.write(msg);
                byte[] h = new byte[8];
                in.readFully(h);
                int len = h[0] == 1
                    ? (h[4] & 0xff) | (h[5] & 0xff) << 8 | (h[6] & 0xff) << 16 | (h[7] & 0xff) << 24
                    : (h[7] & 0xff) | (h[6] & 0xff) << 8 | (h[5] & 0xff) << 16 | (h[4] & 0xff) << 24;
                byte[] body = new byte[len - 8];
                in.readFully(body);
                System.out.println("answer type " + body[0]);
                s.close();
                break;
            }
            default:
                throw new IllegalArgumentException(a[0]);
        }
    }
}
