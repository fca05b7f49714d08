import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;
import org.apache.pulsar.client.admin.Namespaces;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.admin.TopicPolicies;
import org.apache.pulsar.common.policies.data.AutoTopicCreationOverride;
import org.apache.pulsar.common.policies.data.BacklogQuota;
import org.apache.pulsar.common.policies.data.RetentionPolicies;
import org.apache.pulsar.common.policies.data.SchemaCompatibilityStrategy;
import org.apache.pulsar.common.policies.data.TenantInfo;
import org.apache.pulsar.common.util.ObjectMapperFactory;

/**
 * Pulsar's Java admin client over tenants, namespaces, namespace policies and topic-level policies - what the
 * `pulsar-admin tenants|namespaces|topicPolicies` commands call (that CLI, pulsar-client-tools, is not served by
 * Maven Central here; it is a thin layer over these same calls). PulsarJava hands it every command it does not
 * know; each answers one JSON value, as Pulsar's own object mapper writes the object the client returned.
 *
 * <pre>
 *   tenants                               -> admin.tenants().getTenants
 *   tenant-create T CLUSTERS ROLES         CLUSTERS, ROLES: comma separated, "-" for none
 *   tenant-update T CLUSTERS ROLES / tenant-get T (-> TenantInfo) / tenant-delete T
 *   namespaces T / namespace-create NS / namespace-delete NS / namespace-policies NS (-> Policies)
 *   ns-set NS POLICY VALUE [TYPE]          VALUE: JSON without spaces (an int, a boolean, a strategy's name, or
 *   ns-get NS POLICY                       the RetentionPolicies / BacklogQuota / AutoTopicCreationOverride
 *   ns-remove NS POLICY [TYPE]             object); TYPE: a backlog quota type (destination_storage unless given)
 *   unload TOPIC                          -> admin.topics().unload (a partitioned topic's base name: every partition)
 *   topic-set TOPIC POLICY VALUE [TYPE] / topic-get TOPIC POLICY [applied] / topic-remove TOPIC POLICY [TYPE]
 *       POLICY: retention, messageTTL, deduplication, maxProducers, maxConsumers, backlogQuota (get: the map),
 *       schemaCompatibilityStrategy, autoTopicCreation (namespaces only). A namespace's strategy has no remove
 *       call in the client: ns-remove sets UNDEFINED, what `pulsar-admin namespaces
 *       set-schema-compatibility-strategy` does for it.
 * </pre>
 */
final class PulsarAdminCalls {
    private PulsarAdminCalls() {
    }

    /** The command's answer as JSON; null when the command is not one of these. */
    static String run(PulsarAdmin admin, String[] c) throws Exception {
        switch (c[0]) {
            case "tenants":
                return json(admin.tenants().getTenants());
            case "tenant-create":
                admin.tenants().createTenant(c[1], tenant(c[2], c[3]));
                return "true";
            case "tenant-update":
                admin.tenants().updateTenant(c[1], tenant(c[2], c[3]));
                return "true";
            case "tenant-get":
                return json(admin.tenants().getTenantInfo(c[1]));
            case "tenant-delete":
                admin.tenants().deleteTenant(c[1]);
                return "true";
            case "namespaces":
                return json(admin.namespaces().getNamespaces(c[1]));
            case "namespace-create":
                admin.namespaces().createNamespace(c[1]);
                return "true";
            case "namespace-delete":
                admin.namespaces().deleteNamespace(c[1]);
                return "true";
            case "namespace-policies":
                return json(admin.namespaces().getPolicies(c[1]));
            case "ns-set":
                nsSet(admin.namespaces(), c[1], c[2], c[3], quotaType(c, 4));
                return "true";
            case "ns-get":
                return json(nsGet(admin.namespaces(), c[1], c[2]));
            case "ns-remove":
                nsRemove(admin.namespaces(), c[1], c[2], quotaType(c, 3));
                return "true";
            case "topic-set":
                topicSet(admin.topicPolicies(), c[1], c[2], c[3], quotaType(c, 4));
                return "true";
            case "topic-get":
                return json(topicGet(admin.topicPolicies(), c[1], c[2], c.length > 3 && "applied".equals(c[3])));
            case "unload":
                admin.topics().unload(c[1]);
                return "true";
            case "topic-remove":
                topicRemove(admin.topicPolicies(), c[1], c[2], quotaType(c, 3));
                return "true";
            default:
                return null;
        }
    }

    private static TenantInfo tenant(String clusters, String roles) {
        return TenantInfo.builder().allowedClusters(set(clusters)).adminRoles(set(roles)).build();
    }

    private static Set<String> set(String commaSeparated) {
        return "-".equals(commaSeparated) ? new HashSet<>() : new HashSet<>(Arrays.asList(commaSeparated.split(",")));
    }

    private static BacklogQuota.BacklogQuotaType quotaType(String[] c, int at) {
        return c.length > at ? BacklogQuota.BacklogQuotaType.valueOf(c[at]) : BacklogQuota.BacklogQuotaType.destination_storage;
    }

    private static String json(Object value) throws Exception {
        return ObjectMapperFactory.getMapper().getObjectMapper().writeValueAsString(value);  // shaded or not: no type named
    }

    private static <T> T read(String value, Class<T> type) throws Exception {
        return ObjectMapperFactory.getMapper().getObjectMapper().readValue(value, type);
    }

    private static void nsSet(Namespaces ns, String name, String policy, String value, BacklogQuota.BacklogQuotaType type)
            throws Exception {
        switch (policy) {
            case "retention" -> ns.setRetention(name, read(value, RetentionPolicies.class));
            case "messageTTL" -> ns.setNamespaceMessageTTL(name, Integer.parseInt(value));
            case "deduplication" -> ns.setDeduplicationStatus(name, Boolean.parseBoolean(value));
            case "maxProducers" -> ns.setMaxProducersPerTopic(name, Integer.parseInt(value));
            case "maxConsumers" -> ns.setMaxConsumersPerTopic(name, Integer.parseInt(value));
            case "backlogQuota" -> ns.setBacklogQuota(name, read(value, BacklogQuota.class), type);
            case "autoTopicCreation" -> ns.setAutoTopicCreation(name, read(value, AutoTopicCreationOverride.class));
            case "schemaCompatibilityStrategy" ->
                    ns.setSchemaCompatibilityStrategy(name, SchemaCompatibilityStrategy.valueOf(value));
            default -> throw new IllegalArgumentException("unknown namespace policy " + policy);
        }
    }

    private static Object nsGet(Namespaces ns, String name, String policy) throws Exception {
        return switch (policy) {
            case "retention" -> ns.getRetention(name);
            case "messageTTL" -> ns.getNamespaceMessageTTL(name);
            case "deduplication" -> ns.getDeduplicationStatus(name);
            case "maxProducers" -> ns.getMaxProducersPerTopic(name);
            case "maxConsumers" -> ns.getMaxConsumersPerTopic(name);
            case "backlogQuota" -> ns.getBacklogQuotaMap(name);
            case "autoTopicCreation" -> ns.getAutoTopicCreation(name);
            case "schemaCompatibilityStrategy" -> ns.getSchemaCompatibilityStrategy(name);
            default -> throw new IllegalArgumentException("unknown namespace policy " + policy);
        };
    }

    private static void nsRemove(Namespaces ns, String name, String policy, BacklogQuota.BacklogQuotaType type)
            throws Exception {
        switch (policy) {
            case "retention" -> ns.removeRetention(name);
            case "messageTTL" -> ns.removeNamespaceMessageTTL(name);
            case "deduplication" -> ns.removeDeduplicationStatus(name);
            case "maxProducers" -> ns.removeMaxProducersPerTopic(name);
            case "maxConsumers" -> ns.removeMaxConsumersPerTopic(name);
            case "backlogQuota" -> ns.removeBacklogQuota(name, type);
            case "autoTopicCreation" -> ns.removeAutoTopicCreation(name);
            case "schemaCompatibilityStrategy" ->
                    ns.setSchemaCompatibilityStrategy(name, SchemaCompatibilityStrategy.UNDEFINED);
            default -> throw new IllegalArgumentException("unknown namespace policy " + policy);
        }
    }

    private static void topicSet(TopicPolicies tp, String topic, String policy, String value,
                                 BacklogQuota.BacklogQuotaType type) throws Exception {
        switch (policy) {
            case "retention" -> tp.setRetention(topic, read(value, RetentionPolicies.class));
            case "messageTTL" -> tp.setMessageTTL(topic, Integer.parseInt(value));
            case "deduplication" -> tp.setDeduplicationStatus(topic, Boolean.parseBoolean(value));
            case "maxProducers" -> tp.setMaxProducers(topic, Integer.parseInt(value));
            case "maxConsumers" -> tp.setMaxConsumers(topic, Integer.parseInt(value));
            case "backlogQuota" -> tp.setBacklogQuota(topic, read(value, BacklogQuota.class), type);
            case "schemaCompatibilityStrategy" ->
                    tp.setSchemaCompatibilityStrategy(topic, SchemaCompatibilityStrategy.valueOf(value));
            default -> throw new IllegalArgumentException("unknown topic policy " + policy);
        }
    }

    private static Object topicGet(TopicPolicies tp, String topic, String policy, boolean applied) throws Exception {
        return switch (policy) {
            case "retention" -> tp.getRetention(topic, applied);
            case "messageTTL" -> tp.getMessageTTL(topic, applied);
            case "deduplication" -> tp.getDeduplicationStatus(topic, applied);
            case "maxProducers" -> tp.getMaxProducers(topic, applied);
            case "maxConsumers" -> tp.getMaxConsumers(topic, applied);
            case "backlogQuota" -> tp.getBacklogQuotaMap(topic, applied);
            case "schemaCompatibilityStrategy" -> tp.getSchemaCompatibilityStrategy(topic, applied);
            default -> throw new IllegalArgumentException("unknown topic policy " + policy);
        };
    }

    private static void topicRemove(TopicPolicies tp, String topic, String policy, BacklogQuota.BacklogQuotaType type)
            throws Exception {
        switch (policy) {
            case "retention" -> tp.removeRetention(topic);
            case "messageTTL" -> tp.removeMessageTTL(topic);
            case "deduplication" -> tp.removeDeduplicationStatus(topic);
            case "maxProducers" -> tp.removeMaxProducers(topic);
            case "maxConsumers" -> tp.removeMaxConsumers(topic);
            case "backlogQuota" -> tp.removeBacklogQuota(topic, type);
            case "schemaCompatibilityStrategy" -> tp.removeSchemaCompatibilityStrategy(topic);
            default -> throw new IllegalArgumentException("unknown topic policy " + policy);
        }
    }
}
