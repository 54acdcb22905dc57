# A VPC with private subnets (and one NAT gateway per zone for egress), or the caller's own VPC.
data "aws_availability_zones" "available" {
  # checkov:skip=CKV_AWS_394:subnets are created once per zone index; a changed zone list is a planned change
  state = "available"
}

locals {
  create = var.vpc_id == null
  zones  = slice(data.aws_availability_zones.available.names, 0, var.zone_count)
}

resource "aws_vpc" "this" {
  count                = local.create ? 1 : 0
  cidr_block           = var.cidr_block
  enable_dns_support   = true
  enable_dns_hostnames = true
  tags                 = merge(var.tags, { Name = "${var.name}-vpc" })
}

resource "aws_default_security_group" "this" {
  # The default group allows nothing: every component gets its own group.
  count  = local.create ? 1 : 0
  vpc_id = aws_vpc.this[0].id
  tags   = var.tags
}

resource "aws_flow_log" "this" {
  count                = local.create && var.flow_log_bucket_arn != null ? 1 : 0
  vpc_id               = aws_vpc.this[0].id
  traffic_type         = "ALL"
  log_destination_type = "s3"
  log_destination      = var.flow_log_bucket_arn
  tags                 = var.tags
}

resource "aws_subnet" "private" {
  count             = local.create ? var.zone_count : 0
  vpc_id            = aws_vpc.this[0].id
  availability_zone = local.zones[count.index]
  cidr_block        = cidrsubnet(var.cidr_block, 4, count.index)
  tags              = merge(var.tags, { Name = "${var.name}-private-${local.zones[count.index]}", Tier = "private" })
}

resource "aws_subnet" "public" {
  count             = local.create ? var.zone_count : 0
  vpc_id            = aws_vpc.this[0].id
  availability_zone = local.zones[count.index]
  cidr_block        = cidrsubnet(var.cidr_block, 4, var.zone_count + count.index)
  tags              = merge(var.tags, { Name = "${var.name}-public-${local.zones[count.index]}", Tier = "public" })
}

resource "aws_internet_gateway" "this" {
  count  = local.create ? 1 : 0
  vpc_id = aws_vpc.this[0].id
  tags   = var.tags
}

resource "aws_eip" "nat" {
  count  = local.create ? var.zone_count : 0
  domain = "vpc"
  tags   = var.tags
}

resource "aws_nat_gateway" "this" {
  count         = local.create ? var.zone_count : 0
  allocation_id = aws_eip.nat[count.index].id
  subnet_id     = aws_subnet.public[count.index].id
  tags          = var.tags
}

resource "aws_route_table" "public" {
  count  = local.create ? 1 : 0
  vpc_id = aws_vpc.this[0].id
  route {
    cidr_block = "0.0.0.0/0"
    gateway_id = aws_internet_gateway.this[0].id
  }
  tags = var.tags
}

resource "aws_route_table_association" "public" {
  count          = local.create ? var.zone_count : 0
  subnet_id      = aws_subnet.public[count.index].id
  route_table_id = aws_route_table.public[0].id
}

resource "aws_route_table" "private" {
  count  = local.create ? var.zone_count : 0
  vpc_id = aws_vpc.this[0].id
  route {
    cidr_block     = "0.0.0.0/0"
    nat_gateway_id = aws_nat_gateway.this[count.index].id
  }
  tags = var.tags
}

# S3 traffic (checkpoints, state, Delta tables: every micro-batch) through a gateway endpoint, which costs nothing,
# instead of the NAT gateway, which is charged per GB: a stream that runs all month sends a lot.
data "aws_region" "current" {}

resource "aws_vpc_endpoint" "s3" {
  count             = local.create ? 1 : 0
  vpc_id            = aws_vpc.this[0].id
  service_name      = "com.amazonaws.${data.aws_region.current.name}.s3"
  vpc_endpoint_type = "Gateway"
  route_table_ids   = aws_route_table.private[*].id
  tags              = var.tags
}

resource "aws_route_table_association" "private" {
  count          = local.create ? var.zone_count : 0
  subnet_id      = aws_subnet.private[count.index].id
  route_table_id = aws_route_table.private[count.index].id
}

resource "aws_security_group" "jobs" {
  # checkov:skip=CKV2_AWS_5:attached by the spark module (EMR Serverless network configuration), out of this module's view
  name        = "${var.name}-jobs"
  description = "cdckit Spark jobs: outbound to the source database, Kafka and AWS APIs"
  vpc_id      = local.create ? aws_vpc.this[0].id : var.vpc_id
  egress {
    description = "to the VPC (database, Kafka, endpoints)"
    from_port   = 0
    to_port     = 0
    protocol    = "-1"
    cidr_blocks = [local.create ? var.cidr_block : var.vpc_cidr_block]
  }
  egress {
    description = "HTTPS to AWS APIs through the NAT gateway"
    from_port   = 443
    to_port     = 443
    protocol    = "tcp"
    cidr_blocks = ["0.0.0.0/0"]
  }
  dynamic "egress" {
    # a database outside the VPC: a peered VPC, or on-premises over VPN or Direct Connect
    for_each = length(var.database_cidr_blocks) > 0 ? [1] : []
    content {
      description = "to the captured database outside the VPC"
      from_port   = var.database_port
      to_port     = var.database_port
      protocol    = "tcp"
      cidr_blocks = var.database_cidr_blocks
    }
  }
  tags = var.tags
}
