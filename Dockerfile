# The broker image docker-compose.yml runs: this repository installed with pip, nothing else.
#   docker build -t kop .   then   docker run kop broker --config /opt/kop/conf/broker.conf --override ...
# (Not built by the test suite: the machine the project is tested on has no Docker engine.)
FROM python:3.11-slim
WORKDIR /opt/kop
COPY pyproject.toml README.md ./
COPY kop ./kop
COPY conf ./conf
RUN pip install --no-cache-dir . && useradd --system --home-dir /opt/kop kop
USER kop
# Kafka (INTERNAL / EXTERNAL listeners of docker-compose.yml) and the admin HTTP server
EXPOSE 9092 19092 8080
ENTRYPOINT ["kop"]
CMD ["broker", "--config", "/opt/kop/conf/broker.conf"]
