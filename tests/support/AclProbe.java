// Differential oracle for tests/test_security_acl.py: Kafka's own StandardAuthorizer and AclBindingFilter
// answer the scenarios the Python test generates. Run as a single-file program on the Kafka 4.x jars.
import java.net.InetAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.*;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.acl.*;
import org.apache.kafka.common.resource.*;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.security.auth.SecurityProtocol;
import org.apache.kafka.common.utils.internals.SecurityUtils;  // org.apache.kafka.common.utils up to Kafka 4.2
import org.apache.kafka.metadata.authorizer.StandardAcl;
import org.apache.kafka.metadata.authorizer.StandardAuthorizer;
import org.apache.kafka.server.authorizer.*;

public class AclProbe {
    static String opt(String s) { return s.equals("~null") ? null : s; }

    static AuthorizableRequestContext ctx(String principal, String host) throws Exception {
        KafkaPrincipal p = SecurityUtils.parseKafkaPrincipal(principal);
        InetAddress addr = InetAddress.getByName(host);
        return new AuthorizableRequestContext() {
            public String listenerName() { return "PLAINTEXT"; }
            public SecurityProtocol securityProtocol() { return SecurityProtocol.PLAINTEXT; }
            public KafkaPrincipal principal() { return p; }
            public InetAddress clientAddress() { return addr; }
            public int requestType() { return 3; }
            public int requestVersion() { return 12; }
            public String clientId() { return "probe"; }
            public int correlationId() { return 1; }
        };
    }

    public static void main(String[] args) throws Exception {
        StandardAuthorizer auth = null;
        List<AclBinding> acls = new ArrayList<>();
        StringBuilder out = new StringBuilder();
        for (String line : Files.readAllLines(Path.of(args[0]))) {
            String[] f = line.split("\t");
            switch (f[0]) {
                case "SCENARIO": {
                    auth = new StandardAuthorizer();
                    Map<String, Object> cfg = new HashMap<>();
                    cfg.put("allow.everyone.if.no.acl.found", f[1]);
                    cfg.put("super.users", f[2]);
                    auth.configure(cfg);
                    // Kafka 4.x's broker hands the authorizer its metrics before use; without them it fails.
                    auth.withPluginMetrics(new org.apache.kafka.common.metrics.internals.PluginMetricsImpl(
                        new org.apache.kafka.common.metrics.Metrics(), new HashMap<>()));
                    acls = new ArrayList<>();
                    break;
                }
                case "ACL": {
                    StandardAcl acl = new StandardAcl(ResourceType.valueOf(f[1]), f[2], PatternType.valueOf(f[3]),
                        f[4], f[5], AclOperation.valueOf(f[6]), AclPermissionType.valueOf(f[7]));
                    auth.addAcl(Uuid.randomUuid(), acl);
                    acls.add(acl.toBinding());
                    break;
                }
                case "LOADED":
                    auth.completeInitialLoad();
                    break;
                case "Q": {
                    Action a = new Action(AclOperation.valueOf(f[5]),
                        new ResourcePattern(ResourceType.valueOf(f[1]), f[2], PatternType.LITERAL), 1, true, true);
                    AuthorizationResult r = auth.authorize(ctx(f[3], f[4]), List.of(a)).get(0);
                    out.append(r == AuthorizationResult.ALLOWED ? "A" : "D").append('\n');
                    break;
                }
                case "R": {
                    AuthorizationResult r = auth.authorizeByResourceType(ctx(f[2], f[3]), AclOperation.valueOf(f[4]),
                        ResourceType.valueOf(f[1]));
                    out.append(r == AuthorizationResult.ALLOWED ? "A" : "D").append('\n');
                    break;
                }
                case "F": {
                    AclBindingFilter filter = new AclBindingFilter(
                        new ResourcePatternFilter(ResourceType.valueOf(f[1]), opt(f[2]), PatternType.valueOf(f[3])),
                        new AccessControlEntryFilter(opt(f[4]), opt(f[5]), AclOperation.valueOf(f[6]),
                            AclPermissionType.valueOf(f[7])));
                    StringBuilder idx = new StringBuilder("M");
                    for (int i = 0; i < acls.size(); i++)
                        if (filter.matches(acls.get(i))) idx.append(' ').append(i);
                    out.append(idx).append('\n');
                    break;
                }
                default:
                    throw new IllegalArgumentException(line);
            }
        }
        System.out.print(out);
    }
}
