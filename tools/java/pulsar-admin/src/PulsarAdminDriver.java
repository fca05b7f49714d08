import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.FileInputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.util.Properties;
import org.apache.pulsar.admin.cli.PulsarAdminTool;

/**
 * Runs many pulsar-admin command lines in one JVM (tests/support/pulsar_admin_cli.py), so that a test of fifty
 * commands pays for one JVM start (about 1-2 s of CPU each on the suite's machine), not fifty.
 *
 * <pre>
 *   java -cp '.cache/pulsar-admin-5.0.1/*:&lt;this class&gt;' PulsarAdminDriver &lt;client.conf&gt;
 * </pre>
 *
 * The client.conf is what `pulsar-admin` reads as its first argument (webServiceUrl, authPlugin, authParams,
 * tls*). Each line on stdin is one command line, its words separated by tabs (`tenants	create	t1	-c	standalone`);
 * for each the driver writes "@@pulsar-admin RC OUTLEN ERRLEN\n" and then the command's stdout and stderr bytes.
 *
 * Why a subclass and not PulsarAdminTool.main: main ends the JVM (a forceful halt) after one command. Its
 * non-exiting entry is the protected run(String[]), which main calls and maps to the exit code: true -> 0, false
 * -> 1; RC here is the same. One tool object serves every line, so the admin client it builds on first use (one
 * HTTP client) is reused, as the CLI's own `pulsar-shell` does. The commands print through System.out/System.err
 * (swapped per command) and picocli through the command line's own writers (set per command too).
 */
public class PulsarAdminDriver extends PulsarAdminTool {

    PulsarAdminDriver(Properties properties) throws Exception {
        super(properties);
    }

    public static void main(String[] args) throws Exception {
        Properties properties = new Properties();
        try (FileInputStream in = new FileInputStream(args[0])) {
            properties.load(in);
        }
        PulsarAdminDriver tool = new PulsarAdminDriver(properties);
        PrintStream realOut = System.out;
        PrintStream realErr = System.err;
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            PrintStream capturedOut = new PrintStream(out, true, StandardCharsets.UTF_8);
            PrintStream capturedErr = new PrintStream(err, true, StandardCharsets.UTF_8);
            System.setOut(capturedOut);
            System.setErr(capturedErr);
            int rc = tool.runLine(line.split("\t", -1), capturedOut, capturedErr);
            capturedOut.flush();
            capturedErr.flush();
            System.setOut(realOut);
            System.setErr(realErr);
            byte[] o = out.toByteArray();
            byte[] e = err.toByteArray();
            realOut.print("@@pulsar-admin " + rc + " " + o.length + " " + e.length + "\n");
            realOut.write(o);
            realOut.write(e);
            realOut.flush();
        }
        System.exit(0); // stdin closed: the session is over, whatever threads the admin client keeps
    }

    /** One command line, as `pulsar-admin <conf> words...` would run it: its exit code. */
    @SuppressWarnings("deprecation")
    private int runLine(String[] words, PrintStream out, PrintStream err) {
        PrintWriter outWriter = new PrintWriter(out, true);
        PrintWriter errWriter = new PrintWriter(err, true);
        commander.setOut(outWriter);
        commander.setErr(errWriter);
        try {
            return run(words) ? 0 : 1;
        } catch (Throwable t) { // what would have ended the CLI's JVM with a stack trace
            t.printStackTrace(err);
            return 1;
        } finally {
            outWriter.flush();
            errWriter.flush();
        }
    }
}
