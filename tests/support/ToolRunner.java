import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.locks.LockSupport;

/**
 * Runs Kafka tool commands one after another in one JVM (tests/support/java.py ToolSession), so a test that
 * runs dozens of kafka-consumer-groups or kafka-transactions commands pays for one JVM start, not dozens.
 *
 * Protocol: each line on stdin is one command, tab-separated: main class, then its arguments. For each the
 * runner writes to stdout a header "@@tool RC OUTLEN ERRLEN\n" and then the command's stdout and stderr bytes.
 * The command's System.out/System.err are captured; log4j writes to the JVM's real stderr.
 *
 * A tool ends either by returning from main (rc 0) or through Kafka's Exit.exit/halt (its code). Exit's
 * procedure is replaced: it reports the code and parks the calling thread for good, because code after an
 * Exit.exit call (and the tools' catch-all handlers around it) must not run, as it would not in a real exit.
 */
public class ToolRunner {
    private static volatile CompletableFuture<Integer> current;

    public static void main(String[] ignored) throws Exception {
        PrintStream realOut = System.out;
        PrintStream realErr = System.err;
        interceptExit();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] parts = line.split("\t", -1);
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            PrintStream capturedOut = new PrintStream(out, true, StandardCharsets.UTF_8);
            PrintStream capturedErr = new PrintStream(err, true, StandardCharsets.UTF_8);
            System.setOut(capturedOut);
            System.setErr(capturedErr);
            CompletableFuture<Integer> done = new CompletableFuture<>();
            current = done;
            Thread tool = new Thread(() -> run(parts, done), "tool-" + parts[0]);
            tool.setDaemon(true);
            tool.start();
            int rc = done.get();
            capturedOut.flush();
            capturedErr.flush();
            System.setOut(realOut);
            System.setErr(realErr);
            byte[] o = out.toByteArray();
            byte[] e = err.toByteArray();
            realOut.print("@@tool " + rc + " " + o.length + " " + e.length + "\n");
            realOut.write(o);
            realOut.write(e);
            realOut.flush();
        }
        System.exit(0); // stdin closed: the session is over, whatever threads the tools left behind
    }

    /** Kafka's Exit (org.apache.kafka.common.utils up to 4.3, ...utils.internals from 4.4) reports to stop(). */
    private static void interceptExit() throws Exception {
        Class<?> exit;
        try {
            exit = Class.forName("org.apache.kafka.common.utils.internals.Exit");
        } catch (ClassNotFoundException e) {
            exit = Class.forName("org.apache.kafka.common.utils.Exit");
        }
        Class<?> procedure = Class.forName(exit.getName() + "$Procedure");
        Object proxy = Proxy.newProxyInstance(procedure.getClassLoader(), new Class<?>[] {procedure},
            (self, method, args) -> {
                if (method.getDeclaringClass() == Object.class) {
                    return method.getName().equals("equals") ? self == args[0]
                        : method.getName().equals("hashCode") ? System.identityHashCode(self) : "ToolRunner.exit";
                }
                stop((Integer) args[0]);
                return null;
            });
        exit.getMethod("setExitProcedure", procedure).invoke(null, proxy);
        exit.getMethod("setHaltProcedure", procedure).invoke(null, proxy);
    }

    private static void run(String[] parts, CompletableFuture<Integer> done) {
        try {
            Class.forName(parts[0]).getMethod("main", String[].class)
                .invoke(null, (Object) Arrays.copyOfRange(parts, 1, parts.length));
            done.complete(0);
        } catch (InvocationTargetException e) {
            e.getCause().printStackTrace();
            done.complete(1);
        } catch (Throwable e) {
            e.printStackTrace();
            done.complete(1);
        }
    }

    private static void stop(int code) {
        CompletableFuture<Integer> done = current;
        if (done != null) {
            done.complete(code);
        }
        while (true) {
            LockSupport.park();
        }
    }
}
