package lakelog.spark;

import org.sparkproject.connect.grpc.ForwardingServerCallListener;
import org.sparkproject.connect.grpc.Metadata;
import org.sparkproject.connect.grpc.ServerCall;
import org.sparkproject.connect.grpc.ServerCallHandler;
import org.sparkproject.connect.grpc.ServerInterceptor;
import org.sparkproject.connect.grpc.Status;

/**
 * Spark Connect calls authenticated with the cluster's credentials (`spark.connect.grpc.interceptor.classes`;
 * see {@link SqlAccess}): the `authorization` metadata is checked by a node, a refused call is
 * closed with UNAUTHENTICATED (or PERMISSION_DENIED for a principal that may read nothing) before
 * any message reaches Spark, and every message of an admitted call carries the principal as its
 * user id. Uploading artifacts (jars, Python files: code to run on the server) is refused to every
 * principal, super users included (see {@link SqlAccessExtension}: the server runs no client code).
 */
public final class SqlAuthInterceptor implements ServerInterceptor {
    static final Metadata.Key<String> AUTHORIZATION = Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

    @Override
    public <ReqT, RespT> ServerCall.Listener<ReqT> interceptCall(ServerCall<ReqT, RespT> call, Metadata headers,
                                                                 ServerCallHandler<ReqT, RespT> next) {
        final SqlAccess.Grant grant;
        try {
            grant = SqlAccess.authenticate(headers.get(AUTHORIZATION));
        } catch (SqlAccess.Refused e) {
            Status status = "UNAUTHENTICATED".equals(e.status) ? Status.UNAUTHENTICATED
                : "PERMISSION_DENIED".equals(e.status) ? Status.PERMISSION_DENIED : Status.UNAVAILABLE;
            call.close(status.withDescription("lakelog: " + e.getMessage()), new Metadata());
            return new ServerCall.Listener<ReqT>() {};
        }
        String method = call.getMethodDescriptor().getFullMethodName();
        if (method.endsWith("/AddArtifacts")) {  // jars and Python files to run on the server
            call.close(Status.PERMISSION_DENIED.withDescription("lakelog: " + grant.principal + " may not add "
                                                                + "artifacts (code) to the SQL server"), new Metadata());
            return new ServerCall.Listener<ReqT>() {};
        }
        return new ForwardingServerCallListener.SimpleForwardingServerCallListener<ReqT>(next.startCall(call, headers)) {
            @Override
            @SuppressWarnings("unchecked")
            public void onMessage(ReqT message) {
                super.onMessage((ReqT) SqlAccess.withUserId(message, grant.principal));
            }
        };
    }
}
