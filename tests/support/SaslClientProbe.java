// The client side of Kafka's own SASL mechanisms (kafka-clients 4.x), for tests/test_security_sasl_java.py.
// No sockets: it prints each client token as "T <hex>" and reads each server token as "S <hex>" on stdin,
// then prints "OK" once the client considers the exchange complete, or "ERR <message>".
//   java -cp 'kafka-libs/*' SaslClientProbe SCRAM-SHA-256 <user> <password>
//   java -cp 'kafka-libs/*' SaslClientProbe OAUTHBEARER <jwt> <principal>
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.*;
import javax.security.auth.callback.*;
import javax.security.auth.login.AppConfigurationEntry;
import javax.security.sasl.Sasl;
import javax.security.sasl.SaslClient;
import org.apache.kafka.common.security.auth.AuthenticateCallbackHandler;
import org.apache.kafka.common.security.auth.SaslExtensions;
import org.apache.kafka.common.security.auth.SaslExtensionsCallback;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerToken;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerTokenCallback;
import org.apache.kafka.common.security.oauthbearer.internals.OAuthBearerSaslClientProvider;
import org.apache.kafka.common.security.scram.ScramExtensionsCallback;
import org.apache.kafka.common.security.scram.internals.ScramSaslClientProvider;

public class SaslClientProbe {
    static String hex(byte[] b) { return b == null ? "" : HexFormat.of().formatHex(b); }

    public static void main(String[] args) throws Exception {
        String mechanism = args[0];
        ScramSaslClientProvider.initialize();
        OAuthBearerSaslClientProvider.initialize();
        // Kafka's OAUTHBEARER client insists on its own handler interface (configure/close/handle).
        AuthenticateCallbackHandler handler = new AuthenticateCallbackHandler() {
          public void configure(Map<String, ?> configs, String mech, List<AppConfigurationEntry> jaas) { }
          public void close() { }
          public void handle(Callback[] callbacks) throws UnsupportedCallbackException {
            for (Callback cb : callbacks) {
                if (cb instanceof NameCallback) ((NameCallback) cb).setName(args[1]);
                else if (cb instanceof PasswordCallback) ((PasswordCallback) cb).setPassword(args[2].toCharArray());
                else if (cb instanceof ScramExtensionsCallback) ((ScramExtensionsCallback) cb).extensions(Map.of());
                else if (cb instanceof SaslExtensionsCallback)
                    ((SaslExtensionsCallback) cb).extensions(new SaslExtensions(Map.of("traceId", "java")));
                else if (cb instanceof OAuthBearerTokenCallback)
                    ((OAuthBearerTokenCallback) cb).token(new OAuthBearerToken() {
                        public String value() { return args[1]; }
                        public Set<String> scope() { return Set.of(); }
                        public long lifetimeMs() { return Long.MAX_VALUE; }
                        public String principalName() { return args[2]; }
                        public Long startTimeMs() { return null; }
                    });
                else throw new UnsupportedCallbackException(cb);
            }
          }
        };
        SaslClient client = Sasl.createSaslClient(new String[]{mechanism}, null, "kafka", "localhost",
            new HashMap<>(), handler);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        try {
            byte[] token = client.hasInitialResponse() ? client.evaluateChallenge(new byte[0]) : new byte[0];
            System.out.println("T " + hex(token));
            System.out.flush();
            String line;
            while ((line = in.readLine()) != null) {
                if (client.isComplete()) {  // PLAIN: done with its one message, as Kafka's client sees it
                    System.out.println("OK");
                    break;
                }
                byte[] challenge = HexFormat.of().parseHex(line.substring(2).trim());
                byte[] answer = client.evaluateChallenge(challenge);
                if (client.isComplete()) {
                    System.out.println("OK");
                    break;
                }
                System.out.println("T " + hex(answer));
                System.out.flush();
            }
        } catch (Exception e) {
            System.out.println("ERR " + e.getMessage());
        }
        System.out.flush();
    }
}
